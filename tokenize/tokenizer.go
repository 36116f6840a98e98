package tokenize

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"
)

// ErrUnsupported marks what this package refuses because it cannot reproduce the reference
// exactly: a tokenizer.json feature at Load, a chat request feature at EncodeChat. Test with
// errors.Is; the caller then uses the engine's /tokenize or routes on load alone.
var ErrUnsupported = errors.New("not reproducible exactly")

// Tokenizer encodes text into token ids exactly as the HuggingFace tokenizer it was loaded from.
// It is safe for concurrent use.
type Tokenizer struct {
	model        bpeModel
	added        *addedMatcher // tokens matched on the raw text
	addedNorm    *addedMatcher // tokens marked normalized: matched after normalization
	normalizeNFC bool
	splits       []matcher // pre-tokenizer splits, applied in order
	prefix       []uint32  // post-processor ids before the text (add_special_tokens)
	suffix       []uint32  // and after it
	decode       []string  // id -> raw bytes, for Decode
	cache        *pieceCache
	chat         *chatRenderer // nil when the model has no chat template
	desc         string
}

// Options tune a Tokenizer; the zero value is the default.
type Options struct {
	// CacheEntries bounds the cache of encoded pieces (default 65536; negative disables it).
	CacheEntries int
}

// Load reads a HuggingFace tokenizer from path: a tokenizer.json file or a model directory holding
// one. A tokenizer_config.json beside it supplies the chat template, the special tokens the
// template sees and the add_bos_token / add_eos_token settings transformers applies; a
// chat_template.jinja file there takes precedence for the template, as in transformers.
func Load(path string) (*Tokenizer, error) { return LoadWith(path, Options{}) }

// LoadWith is Load with options.
func LoadWith(path string, opts Options) (*Tokenizer, error) {
	file, dir := path, filepath.Dir(path)
	if st, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	} else if st.IsDir() {
		file, dir = filepath.Join(path, "tokenizer.json"), path
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tokenize: read the tokenizer (pass a tokenizer.json or a directory holding one): %w", err)
	}
	var cfg *tokenizerConfig
	if b, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json")); err == nil {
		cfg = &tokenizerConfig{}
		if err := json.Unmarshal(b, cfg); err != nil {
			return nil, fmt.Errorf("tokenize: parse %s: %w", filepath.Join(dir, "tokenizer_config.json"), err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
			cfg.templateFile = string(b)
		}
	}
	t, err := build(raw, cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", file, err)
	}
	return t, nil
}

// tokenizerJSON is the part of tokenizer.json this package reads.
type tokenizerJSON struct {
	AddedTokens   addedTokenInfo  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type                    string            `json:"type"`
		Dropout                 *float64          `json:"dropout"`
		UnkToken                *string           `json:"unk_token"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Vocab                   map[string]uint32 `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
	} `json:"model"`
}

type component struct {
	Type string `json:"type"`
	// Sequence
	Normalizers   []json.RawMessage `json:"normalizers"`
	Pretokenizers []json.RawMessage `json:"pretokenizers"`
	Processors    []json.RawMessage `json:"processors"`
	// Split
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
	// ByteLevel
	AddPrefixSpace bool `json:"add_prefix_space"`
	UseRegex       bool `json:"use_regex"`
	// TemplateProcessing
	Single []struct {
		SpecialToken *struct {
			ID string `json:"id"`
		} `json:"SpecialToken"`
		Sequence *struct {
			ID string `json:"id"`
		} `json:"Sequence"`
	} `json:"single"`
	SpecialTokens map[string]struct {
		IDs []uint32 `json:"ids"`
	} `json:"special_tokens"`
}

func unsupported(format string, args ...any) error {
	return unsupportedReason(ReasonTokenizer, format, args...)
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}

func build(raw []byte, cfg *tokenizerConfig, opts Options) (*Tokenizer, error) {
	ensureClasses()
	var tj tokenizerJSON
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	t := &Tokenizer{}
	if err := t.buildModel(&tj); err != nil {
		return nil, err
	}
	if err := t.buildNormalizer(tj.Normalizer); err != nil {
		return nil, err
	}
	pattern, err := t.buildPreTokenizer(tj.PreTokenizer)
	if err != nil {
		return nil, err
	}
	if err := t.buildPostProcessor(tj.PostProcessor); err != nil {
		return nil, err
	}
	raw2, norm := map[string]uint32{}, map[string]uint32{}
	for _, a := range tj.AddedTokens {
		if a.LStrip || a.RStrip || a.SingleWord {
			return nil, unsupported("added token %q uses lstrip/rstrip/single_word", a.Content)
		}
		if a.Normalized {
			content := a.Content
			if t.normalizeNFC {
				content = nfc(content)
			}
			norm[content] = a.ID
		} else {
			raw2[a.Content] = a.ID
		}
		for int(a.ID) >= len(t.decode) {
			t.decode = append(t.decode, "")
		}
		t.decode[a.ID] = a.Content
	}
	t.added, t.addedNorm = newAddedMatcher(raw2), newAddedMatcher(norm)
	if cfg != nil {
		if err := t.applyConfig(cfg, tj.AddedTokens); err != nil {
			return nil, err
		}
	}
	if opts.CacheEntries == 0 {
		opts.CacheEntries = 1 << 16
	}
	if opts.CacheEntries > 0 {
		t.cache = newPieceCache(opts.CacheEntries)
	}
	t.desc = fmt.Sprintf("byte-level BPE, %d tokens + %d added, %s pre-tokenizer", len(tj.Model.Vocab), len(tj.AddedTokens), pattern)
	return t, nil
}

func (t *Tokenizer) buildModel(tj *tokenizerJSON) error {
	m := &tj.Model
	switch {
	case m.Type != "BPE":
		return unsupported("model type %q (only byte-level BPE is supported)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return unsupported("BPE dropout")
	case m.ByteFallback:
		return unsupported("BPE byte_fallback (a SentencePiece-style model, not byte-level)")
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return unsupported("BPE continuing_subword_prefix %q", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return unsupported("BPE end_of_word_suffix %q", *m.EndOfWordSuffix)
	}
	bm := bpeModel{
		vocab:        make(map[string]uint32, len(m.Vocab)),
		merges:       newMergeTable(len(m.Merges)),
		ignoreMerges: m.IgnoreMerges,
	}
	var have [256]bool
	for tok, id := range m.Vocab {
		b, ok := fromByteLevel(tok)
		if !ok {
			// Not reachable by BPE from bytes (typically an added token also listed in the
			// vocabulary): it decodes as written.
			b = tok
		} else {
			bm.vocab[b] = id
		}
		if ok && len(b) == 1 {
			bm.byteTok[b[0]], have[b[0]] = id, true
		}
		for int(id) >= len(t.decode) {
			t.decode = append(t.decode, "")
		}
		t.decode[id] = b
	}
	for b, ok := range have {
		if !ok {
			return unsupported("vocabulary has no token for byte 0x%02X (not a byte-level BPE vocabulary)", b)
		}
	}
	for rank, rawMerge := range m.Merges {
		var a, b string
		var pair []string
		var line string
		switch {
		case json.Unmarshal(rawMerge, &line) == nil:
			parts := strings.Split(line, " ")
			if len(parts) != 2 {
				return fmt.Errorf("merge %d %q is not two tokens separated by one space", rank, line)
			}
			a, b = parts[0], parts[1]
		case json.Unmarshal(rawMerge, &pair) == nil && len(pair) == 2:
			a, b = pair[0], pair[1]
		default:
			return fmt.Errorf("merge %d is neither \"a b\" nor [\"a\", \"b\"]: %s", rank, rawMerge)
		}
		ia, oka := m.Vocab[a]
		ib, okb := m.Vocab[b]
		im, okm := m.Vocab[a+b]
		if !oka || !okb || !okm {
			return fmt.Errorf("merge %d (%q, %q) refers to a token missing from the vocabulary", rank, a, b)
		}
		bm.merges.put(pairKey(ia, ib), uint64(rank)<<32|uint64(im))
	}
	t.model = bm
	return nil
}

func (t *Tokenizer) buildNormalizer(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("parse normalizer: %w", err)
	}
	switch c.Type {
	case "NFC":
		t.normalizeNFC = true
		return nil
	case "Sequence":
		for _, n := range c.Normalizers {
			if err := t.buildNormalizer(n); err != nil {
				return err
			}
		}
		return nil
	}
	return unsupported("normalizer %q (supported: NFC, Sequence of NFC)", c.Type)
}

// patternNames names the supported pre-tokenizer regexes for descriptions.
var patternNames = map[string]string{
	patQwen2: "qwen2", patLlama3: "llama3", patO200k: "o200k", patDigits3: "digits", patCJK: "cjk", patDeepSeek: "deepseek",
}

func (t *Tokenizer) buildPreTokenizer(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", unsupported("no pre_tokenizer (a byte-level BPE needs a ByteLevel pre-tokenizer)")
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", fmt.Errorf("parse pre_tokenizer: %w", err)
	}
	steps := []json.RawMessage{raw}
	if c.Type == "Sequence" {
		steps = c.Pretokenizers
	}
	var names []string
	for i, s := range steps {
		var p component
		if err := json.Unmarshal(s, &p); err != nil {
			return "", fmt.Errorf("parse pre_tokenizer: %w", err)
		}
		last := i == len(steps)-1
		switch {
		case p.Type == "Split" && !last:
			if p.Pattern.Regex == nil {
				return "", unsupported("Split pre-tokenizer on a plain string")
			}
			m, ok := matchers[*p.Pattern.Regex]
			if !ok {
				return "", unsupported("pre-tokenizer regex %q (supported: the Qwen2, Llama 3, gpt-oss and DeepSeek V3 patterns)", *p.Pattern.Regex)
			}
			if p.Behavior != "Isolated" || p.Invert {
				return "", unsupported("Split behavior %q invert=%v (supported: Isolated)", p.Behavior, p.Invert)
			}
			t.splits = append(t.splits, m)
			names = append(names, patternNames[*p.Pattern.Regex])
		case p.Type == "ByteLevel" && last:
			if p.AddPrefixSpace || p.UseRegex {
				return "", unsupported("ByteLevel pre-tokenizer with add_prefix_space=%v use_regex=%v (supported: both false after a Split)", p.AddPrefixSpace, p.UseRegex)
			}
		default:
			return "", unsupported("pre-tokenizer step %d of type %q (supported: Split steps then ByteLevel)", i, p.Type)
		}
	}
	if len(t.splits) == 0 {
		return "", unsupported("pre_tokenizer without a Split step")
	}
	return strings.Join(names, "+"), nil
}

func (t *Tokenizer) buildPostProcessor(raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var c component
	if err := json.Unmarshal(raw, &c); err != nil {
		return fmt.Errorf("parse post_processor: %w", err)
	}
	switch c.Type {
	case "ByteLevel":
		return nil // offsets only
	case "Sequence":
		for _, p := range c.Processors {
			if err := t.buildPostProcessor(p); err != nil {
				return err
			}
		}
		return nil
	case "TemplateProcessing":
		var pre, suf []uint32
		seen := false
		for _, it := range c.Single {
			switch {
			case it.Sequence != nil:
				if it.Sequence.ID != "A" || seen {
					return unsupported("TemplateProcessing single template with sequence %q", it.Sequence.ID)
				}
				seen = true
			case it.SpecialToken != nil:
				st, ok := c.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return fmt.Errorf("TemplateProcessing refers to undefined special token %q", it.SpecialToken.ID)
				}
				if seen {
					suf = append(suf, st.IDs...)
				} else {
					pre = append(pre, st.IDs...)
				}
			}
		}
		if !seen {
			return unsupported("TemplateProcessing single template without $A")
		}
		t.prefix = append(pre, t.prefix...)
		t.suffix = append(t.suffix, suf...)
		return nil
	}
	return unsupported("post_processor %q (supported: ByteLevel, TemplateProcessing, Sequence)", c.Type)
}

// String describes the tokenizer for logs.
func (t *Tokenizer) String() string { return t.desc }

// Encode returns the token ids of text; addSpecial adds the post-processor's special tokens (vLLM
// encodes completion prompts with add_special_tokens=True, rendered chats without). Invalid UTF-8
// is replaced by U+FFFD first, as JSON decoding does.
func (t *Tokenizer) Encode(text string, addSpecial bool) []uint32 {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	ids := make([]uint32, 0, len(text)/3+len(t.prefix)+len(t.suffix)+1)
	if addSpecial {
		ids = append(ids, t.prefix...)
	}
	sc := scratchPool.Get().(*scratch)
	sc.y.start()
	for from := 0; from <= len(text); {
		start, end, id, ok := t.added.next(text, from)
		if !ok {
			start, end = len(text), len(text)
		}
		if start > from {
			ids = t.encodeSegment(text[from:start], ids, sc)
		}
		if !ok {
			break
		}
		ids = append(ids, id)
		from = end
	}
	if t.cache != nil {
		t.cache.count(sc.hits, sc.misses)
		sc.hits, sc.misses = 0, 0
	}
	scratchPool.Put(sc)
	if addSpecial {
		ids = append(ids, t.suffix...)
	}
	return ids
}

// scratch is one Encode's reusable buffers and its piece-cache lookups, counted here and
// added to the cache's totals once.
type scratch struct {
	a, b         []int
	hits, misses uint64
	y            yielder // the encoding's processor sharing (yield.go)
}

var scratchPool = sync.Pool{New: func() any { return &scratch{} }}

// encodeSegment encodes text between raw-matched added tokens: normalize, split out the
// normalized added tokens, pre-tokenize, BPE.
func (t *Tokenizer) encodeSegment(seg string, ids []uint32, sc *scratch) []uint32 {
	if t.normalizeNFC {
		seg = nfc(seg)
	}
	for from := 0; from <= len(seg); {
		start, end, id, ok := t.addedNorm.next(seg, from)
		if !ok {
			start, end = len(seg), len(seg)
		}
		if start > from {
			ids = t.encodePretokenized(seg[from:start], ids, sc)
		}
		if !ok {
			break
		}
		ids = append(ids, id)
		from = end
	}
	return ids
}

func (t *Tokenizer) encodePretokenized(s string, ids []uint32, sc *scratch) []uint32 {
	ends := split(s, t.splits[0], sc.a[:0])
	for _, m := range t.splits[1:] {
		next, begin := sc.b[:0], 0
		for _, e := range ends {
			k := len(next)
			next = split(s[begin:e], m, next)
			for j := k; j < len(next); j++ {
				next[j] += begin
			}
			begin = e
		}
		ends, sc.b = next, ends
	}
	sc.a = ends
	begin := 0
	for _, e := range ends {
		ids = t.encodePiece(s[begin:e], ids, sc)
		begin = e
	}
	return ids
}

func (t *Tokenizer) encodePiece(p string, ids []uint32, sc *scratch) []uint32 {
	if len(p) == 1 {
		return append(ids, t.model.byteTok[p[0]])
	}
	if t.cache == nil || len(p) > maxCachedPiece {
		return t.model.encode(p, ids, &sc.y)
	}
	if got, ok := t.cache.get(p); ok {
		sc.hits++
		sc.y.did(1)
		return append(ids, got...)
	}
	sc.misses++
	n := len(ids)
	ids = t.model.encode(p, ids, &sc.y)
	t.cache.put(p, ids[n:])
	return ids
}

// Decode returns the text of ids (the inverse of Encode up to normalization); ids outside the
// vocabulary are skipped.
func (t *Tokenizer) Decode(ids []uint32) string {
	var b strings.Builder
	for _, id := range ids {
		if int(id) < len(t.decode) {
			b.WriteString(t.decode[id])
		}
	}
	return b.String()
}
