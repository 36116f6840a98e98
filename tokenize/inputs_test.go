package tokenize

import (
	"math/rand/v2"
	"sort"
	"strings"
	"unicode/utf8"
)

// Inputs for the differential tests, generated deterministically from a seed.

var naturalText = []string{
	"The quick brown fox jumps over the lazy dog. It's 3:45pm; we'll see what they've done.",
	"Die Würde des Menschen ist unantastbar. Straße, Größe, Äpfel und Öl.",
	"L'été dernier, nous étions à Paris — c'était magnifique ! « Oui », dit-il.",
	"Съешь же ещё этих мягких французских булок, да выпей чаю.",
	"Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Καλημέρα κόσμε!",
	"مرحبا بالعالم، كيف حالك اليوم؟ ١٢٣٤٥",
	"שלום עולם, מה שלומך היום?",
	"नमस्ते दुनिया, आप कैसे हैं? १२३ संख्या",
	"我们今天去公园散步，天气非常好。人工智能正在改变世界。",
	"日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。ｶﾀｶﾅ",
	"안녕하세요 세계! 오늘 날씨가 좋네요.",
	"สวัสดีชาวโลก วันนี้อากาศดีมาก",
	"Tiếng Việt có dấu: Đây là một câu thử nghiệm.",
	"Emoji: 😀👍🏽👨‍👩‍👧‍👦 🇩🇪 ❤️ ✨ 🤖 and symbols ©®™ ½ ¾ ∑ ∞ ≠ ≤ → ⇒",
	"Math: x² + y² = z², ∫₀¹ f(x) dx ≈ 0.5, α β γ δ ε, 𝐀𝐁𝐂 𝕏 ℝ",
	"  Indented   text\twith\ttabs  and    multiple   spaces   ",
	"Line one\nLine two\r\nLine three\n\n\nLine after blanks\r\r\n",
	"Numbers 1234567890 3.14159 1,000,000 0x1F -42 1e-9 ٣٤ ௫ Ⅻ ①②",
	"I'm, you're, he's, she'd, we've, they'll, it's, DON'T, I'M, 'S 'T 'RE 'VE 'M 'LL 'D",
	"URLs https://example.com/path?q=1&r=2#frag and emails foo.bar@example.org",
}

var codeText = []string{
	"func main() {\n\tfmt.Println(\"hello, world\")\n\tfor i := 0; i < 10; i++ {\n\t\tx += i * 2\n\t}\n}\n",
	"def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\nprint([fib(i) for i in range(10)])\n",
	"{\"model\": \"Qwen/Qwen2.5-3B-Instruct\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 64}",
	"<!DOCTYPE html>\n<html lang=\"en\">\n  <body class='x'>\n    <div id=\"app\">&nbsp;&lt;ok&gt;</div>\n  </body>\n</html>\n",
	"SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;\n",
	"#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
	"const f = async (x) => { await g(x?.y ?? 0); return `${x}px`; };\n// comment /* block */\n",
	"fn main() -> Result<(), Box<dyn Error>> {\n    let v: Vec<u8> = vec![1, 2, 3];\n    Ok(())\n}\n",
	"$ ls -la | grep '\\.go$' | wc -l && echo \"done\" >> /tmp/log.txt 2>&1\n",
	"    // deeply\n        // indented\n            return x;\n\r\n\t\t\t}\n",
}

// edgeAtoms are fragments that stress contractions, whitespace and class boundaries.
var edgeAtoms = []string{
	" ", "  ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u0085", "\v", "\f",
	"'", "'s", "'S", "'ſ", "'t", "'T", "'re", "'RE", "'Re", "'ve", "'m", "'ll", "'LL", "'d", "'x", "''",
	"a", "Z", "ab", "AB", "aB", "Ab", "ǅ", "ǈ", "ʰ", "ー", "々", "中", "あ", "ア", "ｱ", "é", "e\u0301", "\u0301", "\u0903",
	"0", "7", "12", "123", "1234", "٣", "Ⅻ", "½", "²", "①",
	".", ",", "!", "?", "...", "--", "/", "//", "\\", "@", "#", "$", "%", "&", "*", "(", ")", "[", "]", "{", "}",
	"<", ">", "=", "+", "-", "_", "`", "~", "^", "|", ":", ";", "\"", "«", "»", "—", "…", "€", "©", "😀", "🏽", "\u200d",
	"\x00", "\x01", "\x1f", "\x7f", "\u00ad", "\ufeff", "\ufffd",
}

// interestingRanges biases random code points towards blocks where classes and normalization are
// tricky (combining marks, scripts newer than Go's tables, Hangul, CJK extensions).
var interestingRanges = [][2]rune{
	{0x0000, 0x024F}, {0x0300, 0x036F}, {0x0370, 0x03FF}, {0x0400, 0x04FF}, {0x0590, 0x06FF}, {0x07C0, 0x08FF},
	{0x0900, 0x0DFF}, {0x0E00, 0x0EFF}, {0x1000, 0x11FF}, {0x1A00, 0x1AFF}, {0x1C80, 0x1CFF}, {0x1D00, 0x1DFF},
	{0x1E00, 0x1FFF}, {0x2000, 0x206F}, {0x2070, 0x218F}, {0x2460, 0x24FF}, {0x2C00, 0x2E7F}, {0x3000, 0x30FF},
	{0x3100, 0x31FF}, {0x4E00, 0x4E2F}, {0xA640, 0xA6FF}, {0xA700, 0xA7FF}, {0xA800, 0xABFF}, {0xAC00, 0xAC3F},
	{0xD7B0, 0xD7FF}, {0xF900, 0xFAFF}, {0xFB00, 0xFDFF}, {0xFE00, 0xFE6F}, {0xFF00, 0xFFFF},
	{0x10000, 0x1007F}, {0x10D00, 0x10D8F}, {0x10EC0, 0x10FFF}, {0x11000, 0x1107F}, {0x11300, 0x1137F},
	{0x11380, 0x113FF}, {0x11900, 0x1195F}, {0x11F00, 0x11F5F}, {0x16100, 0x1613F}, {0x16D40, 0x16D7F},
	{0x16FE0, 0x16FFF}, {0x1CC00, 0x1CEBF}, {0x1D400, 0x1D7FF}, {0x1E000, 0x1E08F}, {0x1E100, 0x1E14F},
	{0x1E4D0, 0x1E5FF}, {0x1F000, 0x1FAFF}, {0x20000, 0x2001F}, {0x2EBF0, 0x2EC2F}, {0x31350, 0x3137F},
	{0xE0000, 0xE007F}, {0xF0000, 0xF001F},
}

// combiningMarks are marks for the soups: old ones with various combining classes, and the ones
// newer than the reference's normalization data.
var combiningMarks = func() []rune {
	out := []rune{0x0300, 0x0301, 0x0302, 0x0308, 0x0316, 0x0323, 0x0327, 0x0328, 0x0345, 0x05B0, 0x05BC, 0x0651,
		0x0654, 0x093C, 0x094D, 0x09BC, 0x0E38, 0x0F71, 0x0F72, 0x1DC0, 0x20D0, 0x302A, 0x3099, 0x309A, 0x1D165,
		0x1D16D, 0x0CBC, 0x0CD5, 0x0B3E, 0x0B57, 0x102E, 0x1161, 0x11A8}
	return append(out, nfcInert...)
}()

// soupBases are starters marks attach to, including decomposable and composable ones.
var soupBases = []rune{'a', 'e', 'o', 'u', 'A', 'C', 'I', 'ü', 'ǖ', 'ệ', 'Å', 'ω', 'ι', 'क', 'ক', 'ଓ', 'ೀ', 'ဥ',
	0x1100, 0xAC00, 0x11935, 0x11930, 0x1D15E, 0x05D0, 0x0627, 0x3046, 0x304B, ' ', '1', '\''}

func randomRune(r *rand.Rand) rune {
	for {
		var c rune
		if r.IntN(4) == 0 {
			c = rune(r.IntN(utf8.MaxRune + 1))
		} else {
			rg := interestingRanges[r.IntN(len(interestingRanges))]
			c = rg[0] + rune(r.IntN(int(rg[1]-rg[0]+1)))
		}
		if utf8.ValidRune(c) {
			return c
		}
	}
}

func words(s string) []string { return strings.Fields(s) }

// genInputs returns n deterministic test strings for a tokenizer whose added tokens are given.
func genInputs(seed uint64, n int, added []string) []string {
	r := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	sort.Strings(added)
	var out []string
	// Every added token in context, first.
	ctx := []string{"", " ", "x", "\n", "  ", "'s", "中", "\u0301", "1"}
	for _, a := range added {
		out = append(out, ctx[r.IntN(len(ctx))]+a+ctx[r.IntN(len(ctx))], a+a, "<"+a+">")
		if len(a) > 2 {
			out = append(out, a[:len(a)-1]+" "+a[1:])
		}
	}
	var allWords []string
	for _, s := range append(append([]string{}, naturalText...), codeText...) {
		allWords = append(allWords, words(s)...)
	}
	seps := []string{" ", " ", " ", "  ", "\n", "\t", ", ", ". ", "\n\n", " \n", "\r\n", "", "-", "'"}
	for len(out) < n {
		var b strings.Builder
		switch k := r.IntN(100); {
		case k < 25: // natural text and code, spliced
			src := naturalText
			if k >= 18 {
				src = codeText
			}
			for m := 1 + r.IntN(3); m > 0; m-- {
				s := src[r.IntN(len(src))]
				i, j := r.IntN(len(s)+1), r.IntN(len(s)+1)
				if i > j {
					i, j = j, i
				}
				for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
					i--
				}
				for j < len(s) && !utf8.RuneStart(s[j]) {
					j++
				}
				b.WriteString(s[i:j])
			}
		case k < 40: // word salad across scripts
			for m := 1 + r.IntN(12); m > 0; m-- {
				b.WriteString(allWords[r.IntN(len(allWords))])
				b.WriteString(seps[r.IntN(len(seps))])
			}
		case k < 60: // whitespace, contraction and class-boundary atoms
			for m := 1 + r.IntN(16); m > 0; m-- {
				b.WriteString(edgeAtoms[r.IntN(len(edgeAtoms))])
			}
		case k < 72: // random code points
			for m := 1 + r.IntN(24); m > 0; m-- {
				b.WriteRune(randomRune(r))
			}
		case k < 84: // combining-mark soups
			for m := 1 + r.IntN(6); m > 0; m-- {
				b.WriteRune(soupBases[r.IntN(len(soupBases))])
				for k := r.IntN(5); k > 0; k-- {
					b.WriteRune(combiningMarks[r.IntN(len(combiningMarks))])
				}
			}
		case k < 92: // added tokens mixed with atoms
			for m := 1 + r.IntN(6); m > 0; m-- {
				if len(added) > 0 && r.IntN(2) == 0 {
					b.WriteString(added[r.IntN(len(added))])
				} else {
					b.WriteString(edgeAtoms[r.IntN(len(edgeAtoms))])
				}
			}
		case k < 99: // digits and punctuation runs
			for m := 1 + r.IntN(8); m > 0; m-- {
				for d := r.IntN(9); d > 0; d-- {
					b.WriteByte(byte('0' + r.IntN(10)))
				}
				b.WriteString(edgeAtoms[r.IntN(len(edgeAtoms))])
			}
		default: // long inputs
			switch r.IntN(4) {
			case 0:
				b.WriteString(strings.Repeat("a", 300+r.IntN(3000)))
			case 1:
				b.WriteString(strings.Repeat(" ", 100+r.IntN(2000)) + "x")
			case 2:
				for b.Len() < 20000 {
					b.WriteString(naturalText[r.IntN(len(naturalText))])
					b.WriteString(seps[r.IntN(len(seps))])
				}
			default:
				b.WriteString(strings.Repeat("!?", 200+r.IntN(500)))
			}
		}
		out = append(out, b.String())
	}
	return out[:n]
}
