package tokenize

import (
	"slices"
	"strings"
	"testing"
)

// FuzzEncode checks that Encode never panics, that decoding gives back the (NFC-normalized,
// UTF-8-repaired) text, and that both merge loops agree.
func FuzzEncode(f *testing.F) {
	tk := loadRef(f, "qwen2_5")
	for _, s := range []string{"Hello world", "<|im_start|>x<|im_end|>", "I'm  fine\r\n\n", "e\u0301\u0323", "\xff\xfe", "ſ'ſ 123456", "日本語 😀"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := tk.Encode(s, true)
		want := nfc(strings.ToValidUTF8(s, "\uFFFD"))
		if got := tk.Decode(ids); got != want {
			t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
		if len(s) >= 2 && len(s) <= smallPiece {
			if a, b := tk.model.encodeSmall(s, nil), tk.model.encodeHeap(s, nil, nil); !slices.Equal(a, b) {
				t.Fatalf("%q: small %v, heap %v", s, a, b)
			}
		}
	})
}

// FuzzRenderChat checks that arbitrary request bodies never panic the chat path.
func FuzzRenderChat(f *testing.F) {
	tk := loadRef(f, "qwen2_5")
	for _, s := range []string{`{"messages":[{"role":"user","content":"hi"}]}`, `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":"{\"a\":1.5}"}}]}],"tools":[{"type":"function","function":{"name":"f"}}]}`, `{}`, `[]`, `{"messages":[{"role":"user","content":[{"type":"text","text":null}]}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ids, err := tk.EncodeChat(body)
		if err == nil && len(ids) == 0 {
			t.Fatalf("EncodeChat(%q) rendered nothing without an error", body)
		}
	})
}
