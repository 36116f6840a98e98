package tokenize

import (
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

// transformersPost lists the tokenizers whose transformers class replaces the tokenizer.json
// post-processor (LlamaTokenizerFast adds BOS from add_bos_token): the oracle, which reads the
// tokenizer.json alone, is compared without special tokens and the prefix checked separately.
var transformersPost = map[string][]uint32{"deepseek_v3": {0}}

// oracleCount is the number of generated strings per tokenizer: 20,000 by default,
// TOKENIZE_ORACLE_N for longer runs (make test-oracle).
func oracleCount(t *testing.T) int {
	if s := os.Getenv("TOKENIZE_ORACLE_N"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("TOKENIZE_ORACLE_N=%q is not a positive integer", s)
		}
		return n
	}
	return 20000
}

func addedContents(t *testing.T, path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		AddedTokens []struct{ Content string } `json:"added_tokens"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range tj.AddedTokens {
		out = append(out, a.Content)
	}
	return out
}

// TestMatchesReference is the differential test: the same generated strings through the
// HuggingFace reference (one node process per tokenizer, batched over a pipe) and through Encode.
func TestMatchesReference(t *testing.T) {
	n := oracleCount(t)
	for i, name := range refTokenizers {
		t.Run(name, func(t *testing.T) {
			tk := loadRef(t, name)
			path := requireTestdata(t, name, "tokenizer.json")
			texts := genInputs(uint64(1000+i), n, addedContents(t, path))
			o := startOracle(t, path)
			override, overridden := transformersPost[name]
			start := time.Now()
			mismatches := 0
			err := o.encodeAll(texts, !overridden, func(j int, exp []uint32) {
				s := texts[j]
				got := tk.Encode(s, true)
				if overridden {
					exp = append(slices.Clone(override), exp...)
				}
				if !slices.Equal(got, exp) {
					mismatches++
					if mismatches <= 5 {
						t.Errorf("%q:\n got %v\nwant %v", s, got, exp)
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d mismatches in %d strings (%v)", name, mismatches, len(texts), time.Since(start).Round(time.Millisecond))
			if mismatches > 0 {
				t.Fatalf("%s: %d of %d strings differ from the HuggingFace reference", name, mismatches, len(texts))
			}
		})
	}
}
