package cachealarm

import (
	"encoding/json"
	"fmt"
)

// Compare is the parity sample of the picker's ids against an engine's for one prompt:
// OK when they are equal, else the first position where they differ.
func Compare(what string, picker, engine []uint32) Sample {
	n := min(len(picker), len(engine))
	for i := range n {
		if picker[i] != engine[i] {
			return Sample{Detail: fmt.Sprintf("%s: token %d is %d for the picker, %d for the engine (%d and %d tokens)",
				what, i, picker[i], engine[i], len(picker), len(engine))}
		}
	}
	if len(picker) != len(engine) {
		return Sample{Detail: fmt.Sprintf("%s: the picker has %d tokens, the engine %d (equal up to %d)", what, len(picker), len(engine), n)}
	}
	return Sample{OK: true}
}

// ParityText is the completion prompt of a parity sample: words, digits, runs of spaces,
// accents, CJK and an emoji, where byte-level BPE tokenizers of different models or
// revisions part ways.
const ParityText = "Cache-aware routing check: naïve café, 1234567 tokens;\n\tdon't  split   spaces — 東京 🚀 done."

// ParityChat is the chat request of a parity sample (a system and a user turn, rendered
// through the chat template with the generation prompt) for model ("" leaves it out).
func ParityChat(model string) []byte {
	m := ""
	if model != "" {
		b, _ := json.Marshal(model)
		m = `"model":` + string(b) + `,`
	}
	return []byte(`{` + m + `"messages":[{"role":"system","content":"You check cache-aware routing."},` +
		`{"role":"user","content":"Does the picker tokenize this chat as the engine does? Ünïcode, 42."}]}`)
}
