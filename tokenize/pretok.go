package tokenize

import "unicode/utf8"

// A matcher is one hand-written pre-tokenizer regex: it returns the end of the match that starts
// at byte i of s under Oniguruma semantics (alternatives tried in order, greedy quantifiers with
// backtracking), or -1 when no alternative matches there. s is the whole piece being split, so
// lookaheads see its end.
type matcher func(s string, i int) int

// Pre-tokenizer patterns with an exact scanner, keyed by the regex text in tokenizer.json.
const (
	// patQwen2 is the Qwen2/2.5/3 pattern: one digit per piece.
	patQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patLlama3 is the Llama 3/3.1 (cl100k-style) pattern: up to three digits per piece.
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patO200k is gpt-oss's (o200k) pattern: case-aware words with attached contractions.
	patO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patDigits3, patCJK and patDeepSeek are DeepSeek V3's three successive splits.
	patDigits3  = `\p{N}{1,3}`
	patCJK      = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	patDeepSeek = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

var matchers = map[string]matcher{
	patQwen2:    func(s string, i int) int { return matchCL(s, i, 1) },
	patLlama3:   func(s string, i int) int { return matchCL(s, i, 3) },
	patO200k:    matchO200k,
	patDigits3:  matchDigits3,
	patCJK:      matchCJK,
	patDeepSeek: matchDeepSeek,
}

// split appends to ends the end offsets of the pieces of s under "Isolated" splitting: every
// match is a piece and so is every stretch between matches.
func split(s string, m matcher, ends []int) []int {
	last, i := 0, 0
	for i < len(s) {
		if e := m(s, i); e > i {
			if i > last {
				ends = append(ends, i)
			}
			ends = append(ends, e)
			last, i = e, e
			continue
		}
		_, size := decode(s, i)
		i += size
	}
	if last < len(s) {
		ends = append(ends, len(s))
	}
	return ends
}

// decode returns the rune at byte i of s and its size (s is valid UTF-8).
func decode(s string, i int) (rune, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// classAt returns the rune at i, its size and its class bits; at the end of s it returns size 0.
func classAt(s string, i int) (rune, int, uint16) {
	if i >= len(s) {
		return -1, 0, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1, classes.ascii[c]
	}
	r, size := utf8.DecodeRuneInString(s[i:])
	return r, size, classOf(r)
}

// run returns the end of the longest run of runes from i whose class has any bit of mask.
func run(s string, i int, mask uint16) int {
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if classes.ascii[c]&mask == 0 {
				break
			}
			i++
			continue
		}
		_, size, c := classAt(s, i)
		if c&mask == 0 {
			break
		}
		i += size
	}
	return i
}

// contraction matches (?i:'s|'t|'re|'ve|'m|'ll|'d) at i and returns its end, or -1. Oniguruma
// folds U+017F (long s) to s, so "'ſ" matches too.
func contraction(s string, i int) int {
	if i >= len(s) || s[i] != '\'' {
		return -1
	}
	j := i + 1
	if j >= len(s) {
		return -1
	}
	lower := func(b byte) byte { return b | 0x20 }
	switch lower(s[j]) {
	case 's', 't', 'm', 'd':
		return j + 1
	case 'r', 'v':
		if j+1 < len(s) && lower(s[j+1]) == 'e' {
			return j + 2
		}
	case 'l':
		if j+1 < len(s) && lower(s[j+1]) == 'l' {
			return j + 2
		}
	}
	if len(s) >= j+2 && s[j] == 0xC5 && s[j+1] == 0xBF { // U+017F
		return j + 2
	}
	return -1
}

// whitespace handles the three trailing alternatives shared by every pattern:
// \s*[\r\n]+ | \s+(?!\S) | \s+ (the caller has checked s[i] is whitespace).
func whitespace(s string, i int) int {
	end, lastNL, lastSize := i, -1, 0
	for end < len(s) {
		r, size, c := classAt(s, end)
		if c&clsSpace == 0 {
			break
		}
		if r == '\r' || r == '\n' {
			lastNL = end
		}
		lastSize = size
		end += size
	}
	if lastNL >= 0 {
		return lastNL + 1
	}
	if end == len(s) || end-lastSize == i {
		return end
	}
	return end - lastSize
}

// matchCL is the Qwen2 / Llama 3 pattern; digits is 1 or 3.
func matchCL(s string, i int, digits int) int {
	r, size, c := classAt(s, i)
	if r == '\'' {
		if e := contraction(s, i); e > 0 {
			return e
		}
	}
	switch {
	case c&clsL != 0:
		return run(s, i+size, clsL)
	case c&clsN != 0:
		e := i + size
		for k := 1; k < digits; k++ {
			_, sz, cc := classAt(s, e)
			if cc&clsN == 0 {
				break
			}
			e += sz
		}
		return e
	}
	// [^\r\n\p{L}\p{N}]\p{L}+
	if r != '\r' && r != '\n' {
		if _, sz, cc := classAt(s, i+size); cc&clsL != 0 {
			return run(s, i+size+sz, clsL)
		}
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if e := punct(s, i, clsSpace|clsL|clsN, "\r\n"); e > 0 {
		return e
	}
	if c&clsSpace != 0 {
		return whitespace(s, i)
	}
	return -1
}

// punct matches ` ?[^<not>]+[<tail>]*` at i: an optional space, a run of runes with none of the
// class bits in not, then any of the ASCII bytes in tail. It returns -1 when the run is empty.
func punct(s string, i int, not uint16, tail string) int {
	j := i
	if s[j] == ' ' {
		j++
	}
	e := j
	for e < len(s) {
		_, size, c := classAt(s, e)
		if c&not != 0 {
			break
		}
		e += size
	}
	if e == j {
		return -1
	}
	for e < len(s) && indexByte(tail, s[e]) {
		e++
	}
	return e
}

func indexByte(set string, b byte) bool {
	for i := 0; i < len(set); i++ {
		if set[i] == b {
			return true
		}
	}
	return false
}

const (
	o200kUpper = clsLu | clsLt | clsLm | clsLo | clsM
	o200kLower = clsLl | clsLm | clsLo | clsM
)

// matchO200k is gpt-oss's pattern.
func matchO200k(s string, i int) int {
	r, size, c := classAt(s, i)
	prefix := r != '\r' && r != '\n' && c&(clsL|clsN) == 0
	// Alternative 1: prefix? upper* lower+ contraction?
	if prefix {
		if e := o200kWord1(s, i+size); e > 0 {
			return e
		}
	}
	if e := o200kWord1(s, i); e > 0 {
		return e
	}
	// Alternative 2: prefix? upper+ lower* contraction?
	if prefix {
		if e := o200kWord2(s, i+size); e > 0 {
			return e
		}
	}
	if e := o200kWord2(s, i); e > 0 {
		return e
	}
	if c&clsN != 0 {
		e := i + size
		for k := 1; k < 3; k++ {
			_, sz, cc := classAt(s, e)
			if cc&clsN == 0 {
				break
			}
			e += sz
		}
		return e
	}
	if e := punct(s, i, clsSpace|clsL|clsN, "\r\n/"); e > 0 {
		return e
	}
	if c&clsSpace != 0 {
		return whitespace(s, i)
	}
	return -1
}

// o200kWord1 matches [upper]*[lower]+ contraction? at j: the greedy upper run backs off one rune
// at a time until a lower rune follows.
func o200kWord1(s string, j int) int {
	var stops [64]int
	pos := append(stops[:0], j)
	for e := j; ; {
		_, size, c := classAt(s, e)
		if c&o200kUpper == 0 {
			break
		}
		e += size
		pos = append(pos, e)
	}
	for k := len(pos) - 1; k >= 0; k-- {
		_, size, c := classAt(s, pos[k])
		if c&o200kLower == 0 {
			continue
		}
		e := run(s, pos[k]+size, o200kLower)
		if ce := contraction(s, e); ce > 0 {
			return ce
		}
		return e
	}
	return -1
}

// o200kWord2 matches [upper]+[lower]* contraction? at j.
func o200kWord2(s string, j int) int {
	e := run(s, j, o200kUpper)
	if e == j {
		return -1
	}
	e = run(s, e, o200kLower)
	if ce := contraction(s, e); ce > 0 {
		return ce
	}
	return e
}

// matchDigits3 is \p{N}{1,3}.
func matchDigits3(s string, i int) int {
	e := i
	for k := 0; k < 3; k++ {
		_, size, c := classAt(s, e)
		if c&clsN == 0 {
			break
		}
		e += size
	}
	if e == i {
		return -1
	}
	return e
}

func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FA5) || (r >= 0x3040 && r <= 0x309F) || (r >= 0x30A0 && r <= 0x30FF)
}

// matchCJK is [\x{4e00}-\x{9fa5}\x{3040}-\x{309f}\x{30a0}-\x{30ff}]+.
func matchCJK(s string, i int) int {
	e := i
	for e < len(s) {
		r, size := decode(s, e)
		if !isCJK(r) {
			break
		}
		e += size
	}
	if e == i {
		return -1
	}
	return e
}

func isASCIIPunct(b byte) bool {
	return (b >= '!' && b <= '/') || (b >= ':' && b <= '@') || (b >= '[' && b <= '`') || (b >= '{' && b <= '~')
}

func isASCIILetter(b byte) bool { return (b|0x20) >= 'a' && (b|0x20) <= 'z' }

// matchDeepSeek is DeepSeek V3's third split.
func matchDeepSeek(s string, i int) int {
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		e := i + 2
		for e < len(s) && isASCIILetter(s[e]) {
			e++
		}
		return e
	}
	r, size, c := classAt(s, i)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if r != '\r' && r != '\n' && c&(clsL|clsP|clsS) == 0 {
		if _, sz, cc := classAt(s, i+size); cc&(clsL|clsM) != 0 {
			return run(s, i+size+sz, clsL|clsM)
		}
	}
	if c&(clsL|clsM) != 0 {
		return run(s, i+size, clsL|clsM)
	}
	// ' ?[\p{P}\p{S}]+[\r\n]*'
	j := i
	if s[j] == ' ' {
		j++
	}
	if e := run(s, j, clsP|clsS); e > j {
		for e < len(s) && (s[e] == '\r' || s[e] == '\n') {
			e++
		}
		return e
	}
	if c&clsSpace != 0 {
		return whitespace(s, i)
	}
	return -1
}
