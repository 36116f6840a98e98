package tokenize

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type chatCase struct {
	Name    string          `json:"name"`
	Request json.RawMessage `json:"request"`
}

type chatGolden struct {
	Name     string  `json:"name"`
	Rendered *string `json:"rendered"`
	Skip     string  `json:"skip"`
	Error    string  `json:"error"`
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestChatMatchesJinja2 compares RenderChat with Python jinja2's rendering (configured as
// transformers does, after vLLM's preprocessing) of the committed cases; the goldens come from
// scripts/oracle/chat_goldens.py. A case may be refused (ErrUnsupported) only when the golden
// marks it skipped or when the refusal is the deliberate json_value guard.
func TestChatMatchesJinja2(t *testing.T) {
	var cases []chatCase
	readJSON(t, filepath.Join("testdata", "chat", "cases.json"), &cases)
	for _, model := range []string{"qwen2_5", "qwen3", "llama3", "llama3_1", "deepseek_v3"} {
		t.Run(model, func(t *testing.T) {
			tk := loadRef(t, model)
			var goldens []chatGolden
			readJSON(t, filepath.Join("testdata", "chat", model+".golden.json"), &goldens)
			if len(goldens) != len(cases) {
				t.Fatalf("%d goldens for %d cases: rerun scripts/oracle/chat_goldens.py", len(goldens), len(cases))
			}
			matched := 0
			for i, c := range cases {
				g := goldens[i]
				got, _, err := tk.RenderChat(c.Request)
				switch {
				case g.Skip != "" || g.Error != "":
					if !errors.Is(err, ErrUnsupported) {
						t.Errorf("%s: reference refuses (%s%s), RenderChat gave %q, %v", c.Name, g.Skip, g.Error, got, err)
					}
				case err != nil:
					if Reason(err) != ReasonJSONValue {
						t.Errorf("%s: RenderChat: %v", c.Name, err)
					}
				case got != *g.Rendered:
					t.Errorf("%s:\n got %q\nwant %q", c.Name, got, *g.Rendered)
				default:
					matched++
					ids, err := tk.EncodeChat(c.Request)
					if err != nil || !slices.Equal(ids, tk.Encode(got, false)) {
						t.Errorf("%s: EncodeChat differs from Encode(RenderChat): %v", c.Name, err)
					}
				}
			}
			t.Logf("%s: %d of %d conversations rendered byte for byte as jinja2 does", model, matched, len(cases))
			if matched < 20 {
				t.Errorf("%s: only %d conversations matched; want at least 20", model, matched)
			}
		})
	}
}
