package scoring

import (
	"testing"
	"time"
)

func TestTTFTAwareCreditsTheBlocksPastTheIndexsChunks(t *testing.T) {
	// A family of 1,467-token prompts: a shared document of doc tokens and a question of
	// each request's own. The index matches whole 256-token chunks, 768 of the document
	// on a:1; vLLM on an engine that served a prompt of the family holds its 16-token
	// blocks, all of the document's full blocks. a:1 has a request in prefill (700 uncached
	// tokens a booking lately); b:1 and c:1 are idle and hold nothing. Charged 699 tokens,
	// a:1's estimate (0.347 s) is above an idle engine's for the whole prompt (0.334 s);
	// charged the 475 it computes (the document's last 10 tokens and the question), below.
	const key = 0xd0c
	prompt := func(doc, own int) []uint32 {
		p := make([]uint32, 0, 1467)
		for i := range doc {
			p = append(p, uint32(1+i))
		}
		for i := range 1467 - doc {
			p = append(p, uint32(own*100000+i))
		}
		return p
	}
	other := make([]uint32, 3000)
	for i := range other {
		other[i] = uint32(900000 + i)
	}
	for _, tt := range []struct {
		name    string
		doc     int
		evicted bool // another key's 3,000-token prompt routed to a:1 after the family's, its pool 2,048 tokens
		want    string
	}{
		{"document of 1,002 tokens: a:1 holds 992 of the prompt, not 768", 1002, false, "a:1"},
		{"document of 768 tokens, ending where the index's match does: nothing more held", 768, false, "b:1"},
		{"a:1's free KV allocated again since the family's prompt: its blocks past the chunks are gone", 1002, true, "b:1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("a:1", 700)
			p := mustNew(t, "ttftaware", DefaultParams(), st)
			a := lcand("a:1", 768, 1, 0, 10*time.Second)
			if tt.evicted {
				a.Engine = EngineMetrics{Known: true, KVPoolTokens: 2048}
			}
			cands := []Candidate{a, lcand("b:1", 0, 0, 0, 10*time.Second), lcand("c:1", 0, 0, 0, 10*time.Second)}
			var rs []Ranked
			for i := 1; i <= 3; i++ {
				now := t0.Add(time.Duration(i) * time.Second)
				pr := prompt(tt.doc, i)
				rs = p.Rank(Input{PromptTokens: len(pr), Tokens: pr, PrefixKey: key, Now: now, Candidates: cands})
				if i < 3 {
					st.RoutedPrompt(key, "a:1", pr, now)
				}
			}
			if tt.evicted {
				st.RoutedPrompt(key+1, "a:1", other, t0.Add(3*time.Second))
				pr := prompt(tt.doc, 4)
				rs = p.Rank(Input{PromptTokens: len(pr), Tokens: pr, PrefixKey: key, Now: t0.Add(4 * time.Second), Candidates: cands})
			}
			if rs[0].Addr != tt.want {
				t.Errorf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
		})
	}
}
