package scoring

import (
	"testing"
	"time"
)

func TestTTFTAwareCreditsTheBlocksPastTheIndexsChunks(t *testing.T) {
	// A family of 1,467-token prompts: a shared document of doc tokens and a 465-token
	// question of each request's own. The index matches whole 256-token chunks, 768 of the
	// document on a:1; vLLM on the engine that computed a prompt of the family holds its
	// blocks of 16 tokens, all the document's full blocks.
	const key = 0xd0c
	prompt := func(doc, own int) []uint32 {
		p := make([]uint32, 0, doc+465)
		for i := range doc {
			p = append(p, uint32(1+i))
		}
		for i := range 1467 - doc {
			p = append(p, uint32(own*100000+i))
		}
		return p
	}
	for _, tt := range []struct {
		name     string
		doc      int
		routedTo string
		want     int // a:1's Presumed on the third prompt
	}{
		{"document of 1,002 tokens: a:1 holds its 62 full blocks", 1002, "a:1", 992},
		{"document of 768 tokens, ending where the index's match does: nothing more", 768, "a:1", 0},
		{"the family last went to b:1 and c:1, which still hold it: a:1, routed it before, holds it too", 1002, "b:1", 992},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			p := mustNew(t, "ttftaware", DefaultParams(), st)
			cands := []Candidate{lcand("a:1", 768, 0, 0, 10*time.Second), lcand("b:1", 0, 0, 0, 10*time.Second), lcand("c:1", 0, 0, 0, 10*time.Second)}
			var rs []Ranked
			for i := 1; i <= 3; i++ {
				pr := prompt(tt.doc, i)
				rs = p.Rank(Input{PromptTokens: len(pr), Tokens: pr, PrefixKey: key, Now: t0.Add(time.Duration(i) * time.Second), Candidates: cands})
				to := tt.routedTo
				if to != "a:1" && i == 2 {
					to = "c:1"
				}
				st.RoutedPrompt(key, to, pr, t0.Add(time.Duration(i)*time.Second))
			}
			for _, r := range rs {
				if r.Addr == "a:1" && r.Presumed != tt.want {
					t.Errorf("a:1 presumed %d, want %d", r.Presumed, tt.want)
				}
			}
		})
	}
}
