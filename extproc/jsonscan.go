package extproc

import (
	"bytes"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is the body parser's one pass over the bytes: it validates the whole document
// exactly as encoding/json does (RFC 8259, invalid UTF-8 allowed in strings, at most 10,000
// nested containers) and, on the way, keeps what ParseBody reads: the spans of the top-level
// "model" and "messages" values and the shape of "prompt" with its first token-id list
// already decoded. Top-level keys match as encoding/json matches them to struct fields: an
// exact match, else a case-insensitive one (bytes.EqualFold, after unescaping); the last
// occurrence of a key wins.

// maxDepth is encoding/json's limit on nested objects and arrays.
const maxDepth = 10000

// Shapes of a "prompt" value, as ParseBody tells them apart.
const (
	promptOther   = iota // not a string or a list (null, a number, an object, ...)
	promptString         // "text"
	promptEmpty          // []
	promptStrings        // ["text", ...]: the first element is a string
	promptNested         // [[ids], ...]: the first element is a list
	promptIDs            // [id, ...]: anything else first
)

// prompt is what the scan keeps of a "prompt" value.
type prompt struct {
	seen   bool
	kind   int
	raw    []byte   // the whole value
	first  []byte   // promptString, promptStrings: the (first) string token, quotes included
	mixed  bool     // promptStrings: an element is neither a string nor null
	ids    []uint32 // promptIDs, promptNested: the (first) id list, up to the first bad element
	badPos int      // position of the first element that is not a token id; -1 if none
	bad    []byte   // the body from that element on
}

// scan is one pass over a body.
type scan struct {
	b        []byte
	i        int
	object   bool   // the document is an object
	model    []byte // the last top-level "model" value, nil if none
	messages []byte // the last top-level "messages" value, nil if none
	prompt   prompt
}

// run validates s.b and fills s; it reports false for a body encoding/json would refuse.
func (s *scan) run() bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '{' {
		s.object = true
		if !s.topObject() {
			return false
		}
	} else if !s.value(0) {
		return false
	}
	s.ws()
	return s.i == len(s.b)
}

// Top-level fields ParseBody reads.
const (
	fieldNone = iota
	fieldModel
	fieldPrompt
	fieldMessages
)

// topObject reads the document's object, keeping the fields ParseBody reads.
func (s *scan) topObject() bool {
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	for {
		key, ok := s.key()
		if !ok {
			return false
		}
		s.ws()
		start := s.i
		switch field(key) {
		case fieldPrompt:
			if !s.promptValue() {
				return false
			}
		case fieldModel:
			if !s.value(1) {
				return false
			}
			s.model = s.b[start:s.i]
		case fieldMessages:
			if !s.value(1) {
				return false
			}
			s.messages = s.b[start:s.i]
		default:
			if !s.value(1) {
				return false
			}
		}
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ',':
			s.i++
			s.ws()
		case '}':
			s.i++
			return true
		default:
			return false
		}
	}
}

// field names the struct field encoding/json would store a top-level key in.
func field(key []byte) int {
	if bytes.IndexByte(key, '\\') >= 0 {
		key = unquote(key)
	} else {
		key = key[1 : len(key)-1]
	}
	for _, f := range [...]struct {
		name string
		id   int
	}{{"model", fieldModel}, {"prompt", fieldPrompt}, {"messages", fieldMessages}} {
		if string(key) == f.name {
			return f.id
		}
	}
	for _, f := range [...]struct {
		name string
		id   int
	}{{"model", fieldModel}, {"prompt", fieldPrompt}, {"messages", fieldMessages}} {
		if bytes.EqualFold(key, []byte(f.name)) {
			return f.id
		}
	}
	return fieldNone
}

// promptValue reads a top-level "prompt" value into s.prompt, decoding the first id list.
func (s *scan) promptValue() bool {
	p := &s.prompt
	*p = prompt{seen: true, ids: p.ids[:0], badPos: -1}
	start := s.i
	defer func() { p.raw = s.b[start:s.i] }()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		p.kind = promptString
		if !s.str() {
			return false
		}
		p.first = s.b[start:s.i]
		return true
	case '[':
	default:
		p.kind = promptOther
		return s.value(1)
	}
	s.i++ // '['
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case ']':
		p.kind = promptEmpty
		s.i++
		return true
	case '"':
		p.kind = promptStrings
		return s.stringList()
	case '[':
		p.kind = promptNested
		if !s.idList(3) {
			return false
		}
		return s.listRest(2)
	}
	p.kind = promptIDs
	s.i = start // idList reads the list from its '['
	return s.idList(2)
}

// stringList reads the rest of a list whose first element is a string (at s.i), noting
// elements other than strings and null as encoding/json's []string would refuse them.
func (s *scan) stringList() bool {
	p := &s.prompt
	start := s.i
	if !s.str() {
		return false
	}
	p.first = s.b[start:s.i]
	for {
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ']':
			s.i++
			return true
		case ',':
			s.i++
			s.ws()
		default:
			return false
		}
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case '"':
			if !s.str() {
				return false
			}
		case 'n':
			if !s.literal("null") {
				return false
			}
		default:
			p.mixed = true
			if !s.value(2) {
				return false
			}
		}
	}
}

// listRest reads the rest of a list after an element: (',' value)* ']'; its elements are
// at nesting depth d.
func (s *scan) listRest(d int) bool {
	for {
		s.ws()
		if s.i >= len(s.b) {
			return false
		}
		switch s.b[s.i] {
		case ']':
			s.i++
			return true
		case ',':
			s.i++
			if !s.value(d) {
				return false
			}
		default:
			return false
		}
	}
}

// idList reads the list at s.i (a '[') as token ids into s.prompt.ids, at nesting depth d
// (the list itself counted). Ids are kept up to the first element that is not a token id,
// whose position and bytes are noted; the rest is only validated.
func (s *scan) idList(d int) bool {
	if d > maxDepth {
		return false
	}
	p := &s.prompt
	b := s.b
	ids := p.ids
	if ids == nil {
		ids = make([]uint32, 0, (len(b)-s.i)/5+1)
	}
	defer func() { p.ids = ids }()
	i := skipWS(b, s.i+1) // past '['
	if i < len(b) && b[i] == ']' {
		s.i = i + 1
		return true
	}
	for n := 0; ; n++ {
		// The common case: a plain integer of at most 10 digits, then ',' or ']'.
		start := i
		var v uint64
		for i < len(b) {
			c := b[i] - '0'
			if c > 9 {
				break
			}
			v = v*10 + uint64(c)
			i++
		}
		if nd := i - start; nd > 0 && nd <= 10 && v <= 0xFFFFFFFF && (nd == 1 || b[start] != '0') && i < len(b) {
			switch b[i] {
			case ',':
				ids = append(ids, uint32(v))
				i = skipWS(b, i+1)
				continue
			case ']':
				ids = append(ids, uint32(v))
				s.i = i + 1
				return true
			}
		}
		// Anything else: a number to read as encoding/json would, or the first bad element.
		s.i = start
		if start >= len(b) {
			return false
		}
		if c := b[start]; c == '-' || c-'0' <= 9 {
			if !s.number() {
				return false
			}
			if v, ok := tokenID(b[start:s.i]); ok {
				ids = append(ids, v)
				s.ws()
				if s.i >= len(b) {
					return false
				}
				switch b[s.i] {
				case ',':
					i = skipWS(b, s.i+1)
					continue
				case ']':
					s.i++
					return true
				}
				return false
			}
		} else if !s.value(d) {
			return false
		}
		p.badPos, p.bad = n, b[start:]
		return s.listRest(d)
	}
}

// skipWS returns the offset of the first byte at or after i that is not JSON whitespace.
func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t') {
		i++
	}
	return i
}

// value validates one JSON value at s.i; containers around it number d (encoding/json's
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
		for i < len(b) && plain[b[i]] {
			i++
		}
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
