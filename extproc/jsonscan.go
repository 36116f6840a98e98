package extproc

import (
	"bytes"
	"encoding/binary"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// The validator under the body scan (bodyscan.go): JSON values checked with encoding/json's
// rules, strings decoded as it decodes them.

// maxDepth is encoding/json's limit on nested objects and arrays.
const maxDepth = 10000

// value validates one JSON value at s.i (no whitespace before it); containers around it number d (encoding/json's
// depth limit counts them with the value's own).
func (s *scan) value(d int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '{', '[':
		return s.container(d)
	case '"':
		return s.str()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

// container validates the object or array at s.i without recursion: ends holds the
// closing byte of every container still open.
func (s *scan) container(d int) bool {
	var buf [64]byte
	ends := buf[:0]
	b := s.b
	for {
		// A value is expected at s.i.
		s.ws()
		if s.i >= len(b) {
			return false
		}
		switch c := b[s.i]; c {
		case '{', '[':
			if d+len(ends)+1 > maxDepth {
				return false
			}
			s.i++
			s.ws()
			if s.i < len(b) && b[s.i] == c+2 { // '}' is '{'+2, ']' is '['+2
				s.i++
				break
			}
			ends = append(ends, c+2)
			if c == '{' && !s.keyColon() {
				return false
			}
			continue
		case '"':
			if !s.str() {
				return false
			}
		case 't':
			if !s.literal("true") {
				return false
			}
		case 'f':
			if !s.literal("false") {
				return false
			}
		case 'n':
			if !s.literal("null") {
				return false
			}
		default:
			if !s.number() {
				return false
			}
		}
		// After a value: close containers until one continues with ','.
		for {
			if len(ends) == 0 {
				return true
			}
			s.ws()
			if s.i >= len(b) {
				return false
			}
			end := ends[len(ends)-1]
			if b[s.i] == end {
				s.i++
				ends = ends[:len(ends)-1]
				continue
			}
			if b[s.i] != ',' {
				return false
			}
			s.i++
			if end == '}' && !s.keyColon() {
				return false
			}
			s.ws()
			break
		}
	}
}

// keyColon reads an object key and its ':' and the whitespace after it.
func (s *scan) keyColon() bool {
	_, ok := s.key()
	s.ws()
	return ok
}

// key reads `"name" :` (whitespace before either) and returns the string token.
func (s *scan) key() ([]byte, bool) {
	s.ws()
	start := s.i
	if s.i >= len(s.b) || s.b[s.i] != '"' || !s.str() {
		return nil, false
	}
	k := s.b[start:s.i]
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false
	}
	s.i++
	return k, true
}

// str validates the string token at s.i (a '"').
func (s *scan) str() bool {
	b := s.b
	i := s.i + 1
	for {
		i = skipPlain(b, i)
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return true
		case c == '\\':
			if i+1 >= len(b) {
				return false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return false
				}
				i += 6
			default:
				return false
			}
		default: // a control character
			return false
		}
	}
}

// plain[c] says c needs no attention inside a string: not '"', '\\' or a control character.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// skipPlain returns the index of the first byte of b at or after i that is not plain (or
// len(b)). It looks at eight bytes at a time while none of them is '"', '\\' or a control
// character: a byte at a time, the scan of an 8 KiB prompt was a quarter of the server's
// CPU for its request (decision 1175).
func skipPlain(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if notPlain(binary.LittleEndian.Uint64(b[i:])) {
			break
		}
	}
	for i < len(b) && plain[b[i]] {
		i++
	}
	return i
}

// notPlain reports whether one of the eight bytes of x is not plain: below 0x20, '"' or
// '\\'. (v - 0x01 in every byte) &^ v has a byte's high bit set for some byte of v only if
// one of v's bytes is zero; a byte below 0x20 is one that 0x20 subtracted borrows from.
func notPlain(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	quote, backslash := x^(ones*'"'), x^(ones*'\\')
	return ((x-ones*0x20)&^x|(quote-ones)&^quote|(backslash-ones)&^backslash)&highs != 0
}

func isHex(c byte) bool {
	return c-'0' <= 9 || (c|0x20)-'a' <= 5
}

// number validates the JSON number at s.i.
func (s *scan) number() bool {
	b := s.b
	i := s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i]-'1' <= 8:
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i]-'0' > 9 {
			return false
		}
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i]-'0' > 9 {
			return false
		}
		for i < len(b) && b[i]-'0' <= 9 {
			i++
		}
	}
	s.i = i
	return true
}

// literal reads word (true, false or null) at s.i.
func (s *scan) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// ws skips JSON whitespace.
func (s *scan) ws() { s.i = skipWS(s.b, s.i) }

// unquote decodes a valid string token (quotes included) as encoding/json does: escapes
// resolved, invalid UTF-8 and lone surrogates replaced by U+FFFD. It returns the token's
// own bytes when nothing needs decoding.
func unquote(tok []byte) []byte {
	s := tok[1 : len(tok)-1]
	// The common case, checked a word at a time (a byte at a time, this was a fifth of the
	// server's CPU for an 8 KiB prompt: decision 1175).
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return s
	}
	r := 0
	for r < len(s) {
		c := s[r]
		if c == '\\' {
			break
		}
		if c < utf8.RuneSelf {
			r++
			continue
		}
		rr, size := utf8.DecodeRune(s[r:])
		if rr == utf8.RuneError && size == 1 {
			break
		}
		r += size
	}
	if r == len(s) {
		return s
	}
	out := make([]byte, r, len(s)+utf8.UTFMax)
	copy(out, s[:r])
	for r < len(s) {
		c := s[r]
		switch {
		case c == '\\':
			switch e := s[r+1]; e {
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				rr := hex4(s[r+2:])
				r += 6
				if utf16.IsSurrogate(rr) {
					if r+6 <= len(s) && s[r] == '\\' && s[r+1] == 'u' {
						if dec := utf16.DecodeRune(rr, hex4(s[r+2:])); dec != unicode.ReplacementChar {
							r += 6
							out = utf8.AppendRune(out, dec)
							continue
						}
					}
					rr = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, rr)
				continue
			default: // '"', '\\', '/'
				out = append(out, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			out = append(out, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			out = utf8.AppendRune(out, rr)
			r += size
		}
	}
	return out
}

// hex4 reads four hex digits (already validated).
func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c <= '9':
			r = r<<4 | rune(c-'0')
		default:
			r = r<<4 | rune((c|0x20)-'a'+10)
		}
	}
	return r
}

// skipWS returns the offset of the first byte at or after i that is not JSON whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}
