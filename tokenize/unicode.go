package tokenize

import (
	"strings"
	"sync"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Character class bits, as the reference's regex engine (Oniguruma, Unicode 16) defines them. The
// tables come from unicode_tables.go, which is measured on the reference itself: Go's unicode
// package is an older Unicode version and would misclassify thousands of newer letters.
const (
	clsL uint16 = 1 << iota
	clsN
	clsM
	clsP
	clsS
	clsLu
	clsLl
	clsLt
	clsLm
	clsLo
	clsSpace
	clsNFCInert // Go's NFC would touch it, the reference's does not
)

// classTable is a two-level lookup: stage1[r>>8] selects a 256-entry block of stage2. ascii
// repeats the classes of U+0000 to U+007F for the pre-tokenizers' ASCII fast path (decision 1111).
type classTable struct {
	stage1 []uint16
	stage2 []uint16
	ascii  [utf8.RuneSelf]uint16
}

var (
	classesOnce sync.Once
	classes     classTable
)

// ensureClasses builds the class table once (about 10 ms; done by Load, not at program start).
func ensureClasses() {
	classesOnce.Do(func() { classes = buildClassTable() })
}

func buildClassTable() classTable {
	flat := make([]uint16, utf8.MaxRune+1)
	for _, c := range classRanges {
		for _, r := range c.ranges {
			for x := r[0]; x <= r[1]; x++ {
				flat[x] |= c.bit
			}
		}
	}
	for _, r := range nfcInert {
		flat[r] |= clsNFCInert
	}
	t := classTable{stage1: make([]uint16, (utf8.MaxRune+1)>>8)}
	seen := map[string]uint16{}
	for b := range t.stage1 {
		block := flat[b<<8 : (b+1)<<8]
		key := string(utf16Bytes(block))
		idx, ok := seen[key]
		if !ok {
			idx = uint16(len(t.stage2) >> 8)
			t.stage2 = append(t.stage2, block...)
			seen[key] = idx
		}
		t.stage1[b] = idx
	}
	copy(t.ascii[:], flat[:utf8.RuneSelf])
	return t
}

func utf16Bytes(b []uint16) []byte {
	out := make([]byte, 0, 2*len(b))
	for _, v := range b {
		out = append(out, byte(v), byte(v>>8))
	}
	return out
}

// classOf returns the class bits of r (0 for invalid runes).
func classOf(r rune) uint16 {
	if uint32(r) > utf8.MaxRune {
		return 0
	}
	return classes.stage2[int(classes.stage1[r>>8])<<8|int(r&0xFF)]
}

// nfc normalizes s as the reference does: Go's NFC, except that code points newer than the
// reference's normalization data (clsNFCInert) are left in place as inert starters, which makes
// the text on either side of them normalize independently.
func nfc(s string) string {
	i := 0
	for i < len(s) && s[i] < utf8.RuneSelf {
		i++
	}
	if i == len(s) {
		return s
	}
	var b *strings.Builder
	last := 0
	for j, r := range s[i:] {
		if r < 0x7FD || classOf(r)&clsNFCInert == 0 {
			continue
		}
		if b == nil {
			b = &strings.Builder{}
			b.Grow(len(s))
		}
		at := i + j
		b.WriteString(norm.NFC.String(s[last:at]))
		size := utf8.RuneLen(r)
		b.WriteString(s[at : at+size])
		last = at + size
	}
	if b == nil {
		return norm.NFC.String(s)
	}
	b.WriteString(norm.NFC.String(s[last:]))
	return b.String()
}
