package extproc

import (
	"bytes"
	"testing"
)

// TestSkipPlain holds skipPlain to a byte-at-a-time scan: every filler byte (plain ones on
// both sides of 0x20 and 0x80), every kind of byte that is not plain, at every position of
// buffers up to three words long, from every start.
func TestSkipPlain(t *testing.T) {
	fillers := []byte{0x20, '!', '#', 'a', '[', ']', 0x7f, 0x80, 0xc3, 0xff}
	stops := []byte{0x00, 0x01, 0x1f, '"', '\\'}
	naive := func(b []byte, i int) int {
		for i < len(b) && plain[b[i]] {
			i++
		}
		return i
	}
	for n := 0; n <= 24; n++ {
		for _, f := range fillers {
			for _, c := range stops {
				for pos := -1; pos < n; pos++ {
					b := bytes.Repeat([]byte{f}, n)
					if pos >= 0 {
						b[pos] = c
					}
					for start := 0; start <= n; start++ {
						if got, want := skipPlain(b, start), naive(b, start); got != want {
							t.Fatalf("skipPlain(%q, %d) = %d, want %d", b, start, got, want)
						}
					}
				}
			}
		}
	}
}
