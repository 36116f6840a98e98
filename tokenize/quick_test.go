package tokenize

import (
	"slices"
	"testing"
)

func TestQuick(t *testing.T) {
	for _, name := range refTokenizers {
		tk := loadRef(t, name)
		t.Log(name, tk)
		o := startOracle(t, requireTestdata(t, name, "tokenizer.json"))
		texts := []string{"Hello world", "<|im_start|>hello<|im_end|>", "I'm   fine,\n\n  you're  ok? 12345 ſ 'S 'ſ", "naïve café 日本語のテキスト 中文 한국어 😀👍🏽", "func main() {\n\tfmt.Println(\"hi\")\n}\n", " \t\n\r\n  x  ", "ÀÉÎ déjà-vu ǅ ABCdef XYZ'S", "", "a\u0301\u0323 \u1100\u1161\u11a8"}
		want, err := o.encodeAll(texts, true)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range texts {
			got := tk.Encode(s, true)
			if !slices.Equal(got, want[i]) {
				t.Errorf("%s %q: got %v want %v", name, s, got, want[i])
			}
		}
	}
}
