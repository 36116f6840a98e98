package extproc

import "bytes"

// This file is the body parser's one pass over the bytes: it validates the whole document
// exactly as encoding/json does (the validator is jsonscan.go) and, on the way, keeps what
// ParseBody reads: the spans of the top-level "model", "messages" and "cache_salt" values and the shape of
// "prompt" with its first token-id list already decoded. Top-level keys match as
// encoding/json matches them to struct fields: an exact match, else a case-insensitive one
// (bytes.EqualFold, after unescaping); the last occurrence of a key wins.

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
	salt     []byte // the last top-level "cache_salt" value, nil if none
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
	fieldCacheSalt
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
		case fieldCacheSalt:
			if !s.value(1) {
				return false
			}
			s.salt = s.b[start:s.i]
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

// fieldNames are the top-level keys ParseBody reads.
var fieldNames = [...]struct {
	name string
	id   int
}{{"model", fieldModel}, {"prompt", fieldPrompt}, {"messages", fieldMessages}, {"cache_salt", fieldCacheSalt}}

// field names the struct field encoding/json would store a top-level key in.
func field(key []byte) int {
	if bytes.IndexByte(key, '\\') >= 0 {
		key = unquote(key)
	} else {
		key = key[1 : len(key)-1]
	}
	for _, f := range fieldNames {
		if string(key) == f.name {
			return f.id
		}
	}
	for _, f := range fieldNames {
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
			s.ws()
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
	ids := s.prompt.ids
	if need := (len(s.b)-s.i)/5 + 1; cap(ids) < need {
		ids = make([]uint32, 0, need) // a list longer than that grows as it is read
	}
	var ok bool
	s.prompt.ids, ok = s.readIDs(ids, d)
	return ok
}

// readIDs is idList's loop: it appends to ids, which stays a local (in registers) here.
func (s *scan) readIDs(ids []uint32, d int) ([]uint32, bool) {
	p := &s.prompt
	b := s.b
	i := skipWS(b, s.i+1) // past '['
	if i < len(b) && b[i] == ']' {
		s.i = i + 1
		return ids, true
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
				return ids, true
			}
		}
		// Anything else: a number to read as encoding/json would, or the first bad element.
		s.i = start
		if start >= len(b) {
			return ids, false
		}
		if c := b[start]; c == '-' || c-'0' <= 9 {
			if !s.number() {
				return ids, false
			}
			if v, ok := tokenID(b[start:s.i]); ok {
				ids = append(ids, v)
				s.ws()
				if s.i >= len(b) {
					return ids, false
				}
				switch b[s.i] {
				case ',':
					i = skipWS(b, s.i+1)
					continue
				case ']':
					s.i++
					return ids, true
				}
				return ids, false
			}
		} else if !s.value(d) {
			return ids, false
		}
		p.badPos, p.bad = n, b[start:]
		return ids, s.listRest(d)
	}
}
