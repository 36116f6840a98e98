package tokenize

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// tinyTokenizer writes a small byte-level BPE tokenizer.json (256 byte tokens, a few merges,
// two added tokens) with the given pre_tokenizer/normalizer/post_processor overrides, and
// returns its path.
func tinyTokenizer(t *testing.T, override map[string]any) string {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	bl := func(s string) string {
		var sb strings.Builder
		for i := 0; i < len(s); i++ {
			sb.WriteRune(byteToRune[s[i]])
		}
		return sb.String()
	}
	merges := []string{}
	for _, m := range [][2]string{{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}, {"a", "a"}} {
		merges = append(merges, bl(m[0])+" "+bl(m[1]))
		vocab[bl(m[0]+m[1])] = len(vocab)
	}
	doc := map[string]any{
		"version": "1.0",
		"added_tokens": []map[string]any{
			{"id": 300, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
			{"id": 301, "content": "<|endoftext|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": patQwen2}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|end|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|end|>": map[string]any{"id": "<|end|>", "ids": []int{300}, "tokens": []string{"<|end|>"}}},
		},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": "", "end_of_word_suffix": "",
			"fuse_unk": false, "byte_fallback": false, "vocab": vocab, "merges": merges},
	}
	for k, v := range override {
		if k == "model.byte_fallback" {
			doc["model"].(map[string]any)["byte_fallback"] = v
			continue
		}
		doc[k] = v
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTinyTokenizerEncodes(t *testing.T) {
	tk, err := Load(tinyTokenizer(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	hello := uint32(256 + 3) // "hello" after he, ll, hell, hello
	tests := []struct {
		name       string
		text       string
		addSpecial bool
		want       []uint32
	}{
		{"merges in rank order", "hello", false, []uint32{hello}},
		{"post-processor prefix", "hello", true, []uint32{300, hello}},
		{"added token split out", "hello<|end|>hello", false, []uint32{hello, 300, hello}},
		{"longest added token wins", "<|endoftext|>", false, []uint32{301}},
		{"space joins the word", " wa", false, []uint32{256 + 4, 'a'}},
		{"leftmost merge on ties", "aaa", false, []uint32{256 + 5, 'a'}},
		{"empty text", "", false, []uint32{}},
		{"empty text with specials", "", true, []uint32{300}},
		{"invalid UTF-8 becomes U+FFFD", "\xff", false, []uint32{0xEF, 0xBF, 0xBD}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tk.Encode(tc.text, tc.addSpecial)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
			}
		})
	}
}

func TestLoadRefusesWhatItCannotReproduce(t *testing.T) {
	tests := []struct {
		name     string
		override map[string]any
		want     string
	}{
		{"unknown regex", map[string]any{"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": `\w+`}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}}}}, "pre-tokenizer regex"},
		{"GPT-2 style ByteLevel regex", map[string]any{"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}}, "ByteLevel pre-tokenizer"},
		{"no pre-tokenizer", map[string]any{"pre_tokenizer": nil}, "no pre_tokenizer"},
		{"NFKC normalizer", map[string]any{"normalizer": map[string]any{"type": "NFKC"}}, "normalizer \"NFKC\""},
		{"byte fallback", map[string]any{"model.byte_fallback": true}, "byte_fallback"},
		{"BERT post-processor", map[string]any{"post_processor": map[string]any{"type": "BertProcessing"}}, "post_processor \"BertProcessing\""},
		{"lstrip added token", map[string]any{"added_tokens": []map[string]any{{"id": 300, "content": "<x>", "lstrip": true, "special": true}}}, "lstrip"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tinyTokenizer(t, tc.override))
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) || Reason(err) != ReasonTokenizer {
				t.Fatalf("Load: %v; want ErrUnsupported mentioning %q", err, tc.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Fatalf("Load of a directory without tokenizer.json: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{not json"), 0o644)
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "parse tokenizer.json") {
		t.Fatalf("Load of invalid JSON: %v", err)
	}
}

func TestSpotChecksQwen25(t *testing.T) {
	tk := loadRef(t, "qwen2_5")
	tests := []struct {
		text string
		want []uint32
	}{
		{"Hello world", []uint32{9707, 1879}},
		{"<|im_start|>hello<|im_end|>", []uint32{151644, 14990, 151645}},
	}
	for _, tc := range tests {
		if got := tk.Encode(tc.text, true); !slices.Equal(got, tc.want) {
			t.Errorf("Encode(%q) = %v, want %v", tc.text, got, tc.want)
		}
	}
}

func TestSmallAndHeapMergeAgree(t *testing.T) {
	tk := loadRef(t, "qwen2_5")
	for _, s := range genInputs(7, 3000, nil) {
		for len(s) > smallPiece {
			s = s[:smallPiece]
		}
		if len(s) < 2 {
			continue
		}
		a := tk.model.encodeSmall(s, nil)
		b := tk.model.encodeHeap(s, nil, nil)
		if !slices.Equal(a, b) {
			t.Fatalf("%q: small %v, heap %v", s, a, b)
		}
	}
}

func TestConcurrentEncodeUsesCacheSafely(t *testing.T) {
	tk := loadRef(t, "qwen2_5")
	texts := genInputs(11, 200, nil)
	want := make([][]uint32, len(texts))
	for i, s := range texts {
		want[i] = tk.Encode(s, true)
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, s := range texts {
				if got := tk.Encode(s, true); !slices.Equal(got, want[i]) {
					errs <- s
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for s := range errs {
		t.Errorf("concurrent Encode(%q) differs", s)
	}
	if hits, lookups := tk.CacheStats(); hits == 0 || hits > lookups {
		t.Errorf("cache stats hits=%d lookups=%d: repeated text should hit", hits, lookups)
	}
}

func TestPieceCacheIsBounded(t *testing.T) {
	c := newPieceCache(64)
	for i := 0; i < 10000; i++ {
		c.put(strings.Repeat("x", i%300), []uint32{uint32(i)})
	}
	if n := c.len(); n > 64 {
		t.Fatalf("cache holds %d entries, bound 64", n)
	}
	c.put("kept", []uint32{1})
	if got, ok := c.get("kept"); !ok || !slices.Equal(got, []uint32{1}) {
		t.Fatalf("get(kept) = %v, %v", got, ok)
	}
}

func TestDecodeInvertsEncode(t *testing.T) {
	for _, name := range []string{"qwen2_5", "llama3_1", "deepseek_v3"} {
		tk := loadRef(t, name)
		for _, s := range genInputs(3, 500, nil) {
			want := strings.ToValidUTF8(s, "\uFFFD")
			if tk.normalizeNFC {
				want = nfc(want)
			}
			if got := tk.Decode(tk.Encode(s, false)); got != want {
				t.Fatalf("%s: Decode(Encode(%q)) = %q", name, s, got)
			}
		}
	}
}

// The heap merge, which long pieces take, agrees with the plain quadratic loop (mergeSmall
// given buffers as long as the piece) on pieces past smallPiece: runs of one character (the
// worst shape for the tokenizer, issue 10, whose first candidates are already in order),
// repeated words and generated text (first candidates of many ranks, sorted by the merge),
// with three tokenizers' merge tables (the plain loop is quadratic: the two others' runs stop
// at 1,000 bytes).
func TestHeapMergeAgreesOnLongPieces(t *testing.T) {
	for _, tc := range []struct {
		name    string
		longest int
	}{{"qwen2_5", 3001}, {"llama3_1", 1000}, {"deepseek_v3", 1000}} {
		t.Run(tc.name, func(t *testing.T) { heapMergeAgreesOnLongPieces(t, loadRef(t, tc.name), tc.longest) })
	}
}

// heapMergeAgreesOnLongPieces checks tk's heap merge against its plain loop on runs and
// repeated words of up to longest bytes, and on generated text.
func heapMergeAgreesOnLongPieces(t *testing.T, tk *Tokenizer, longest int) {
	var pieces []string
	for _, n := range []int{smallPiece + 1, 200, 257, 511, 1000, 2048, 3001} {
		if n > longest {
			break
		}
		for _, c := range []string{" ", "\n", "a", "0", "é", "\t "} {
			pieces = append(pieces, strings.Repeat(c, n)[:n])
		}
		pieces = append(pieces, strings.Repeat("the quick brown fox ", n/20+1)[:n])
	}
	for _, s := range genInputs(13, 200, nil) {
		for len(s) <= smallPiece {
			s += s + " "
		}
		pieces = append(pieces, s)
	}
	for _, s := range pieces {
		want := tk.model.mergeSmall(s, nil, make([]uint32, len(s)), make([]uint64, len(s)))
		if got := tk.model.encodeHeap(s, nil, nil); !slices.Equal(got, want) {
			t.Fatalf("%d bytes %.20q...: heap %v, plain loop %v", len(s), s, got, want)
		}
	}
}
