package scoring

import (
	"testing"
	"time"
)

func TestTTFTAwarePresumesByChunks(t *testing.T) {
	// The index shows nothing (no CPU tier publishes). A family's 1,000-token system prompt
	// (3 full chunks and 232 tokens) starts every prompt of the key. Before the request
	// asked about (this session's second turn, 1,500 tokens continuing its 1,100-token first
	// turn), the routes were: this session's first turn to a:1, then other sessions'
	// prompts of the family to b:1, c:1 and (last) d:1; e:1 never took the key.
	const key = 0x51ce
	first := prompt(1100, 1000, 1<<20)
	turn := append(append([]uint32{}, first...), prompt(400, 0, 3<<20)...)
	other := func(own uint32) []uint32 { return prompt(1300, 1000, own) }
	cands := func() []Candidate {
		return []Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0), lcand("c:1", 0, 0, 0, 0),
			lcand("d:1", 0, 0, 0, 0), lcand("e:1", 0, 0, 0, 0)}
	}
	tests := []struct {
		name    string
		tokens  bool // this prompt's token ids handed to the policy (NeedsTokens)
		evictA  bool // a pool's worth of uncached tokens booked on a:1 since its route
		matched int  // a:1's match in the index
		indexed bool // the index showed a holding of an earlier prompt (the fleet publishes KV events)
		want    map[string]int
	}{
		// a:1 holds the first turn's four full chunks (four routes back, which the last two
		// missed); b:1 and c:1 the family's three; d:1 too, though its route (another
		// session's, not continued) is longer.
		{"every engine the chunks went to", true, false, 0, false, map[string]int{"a:1": 1024, "b:1": 768, "c:1": 768, "d:1": 768}},
		{"a:1's holding evicted since", true, true, 0, false, map[string]int{"b:1": 768, "c:1": 768, "d:1": 768}},
		// Without the token ids: the last two routes, each the shorter prompt (decision 1610).
		{"tokens not known: the last two routes", false, false, 0, false, map[string]int{"c:1": 1300, "d:1": 1300}},
		{"the index shows some of it: nothing presumed", true, false, 256, false, map[string]int{}},
		// An index that has shown a holding is the truth: a prompt it does not show was
		// evicted from the CPU tier, and the chunks are not read (the last two routes are).
		{"the index showed a holding before: the last two routes", true, false, 0, true, map[string]int{"c:1": 1300, "d:1": 1300}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			p := mustNew(t, "ttftaware", DefaultParams(), st)
			if tt.indexed {
				seen := cands()
				seen[4].Matched = 512
				p.Rank(Input{PromptTokens: 600, PrefixKey: 0x1de, Tokens: prompt(600, 0, 9<<20), Now: t0, Candidates: seen})
			}
			st.Uncached("a:1", 1100)
			st.RoutedPrompt(key, "a:1", first, t0)
			for i, addr := range []string{"b:1", "c:1", "d:1"} {
				st.Uncached(addr, 1300)
				st.RoutedPrompt(key, addr, other(uint32(4+i)<<20), t0.Add(time.Duration(i+1)*time.Second))
			}
			if tt.evictA {
				st.Uncached("a:1", KVPoolTokens)
			}
			cs := cands()
			cs[0].Matched = tt.matched
			in := Input{PromptTokens: len(turn), PrefixKey: key, Now: t0.Add(5 * time.Second), Candidates: cs}
			if tt.tokens {
				in.Tokens = turn
			}
			rs := p.Rank(in)
			for _, r := range rs {
				if r.Presumed != tt.want[r.Addr] {
					t.Errorf("%s presumed %d, want %d", r.Addr, r.Presumed, tt.want[r.Addr])
				}
			}
		})
	}
}

func TestTTFTAwareChunksAreChainedFromTheStart(t *testing.T) {
	// A prompt sharing a:1's second chunk but not its first holds nothing there: a KV block
	// is reused only after the same tokens before it.
	const key = 0xc4a1
	st := NewState()
	held := prompt(512, 512, 1<<20)
	st.RoutedPrompt(key, "a:1", held, t0)
	shifted := append(prompt(256, 0, 2<<20), held[256:]...)
	in := Input{PromptTokens: 512, PrefixKey: key ^ 2, Tokens: shifted, Now: t0, Candidates: []Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}}
	for _, r := range mustNew(t, "ttftaware", DefaultParams(), st).Rank(in) {
		if r.Presumed != 0 {
			t.Errorf("%s presumed %d, want 0", r.Addr, r.Presumed)
		}
	}
	in.PrefixKey, in.Tokens = key, held
	rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(in)
	if rs[0].Addr != "a:1" || rs[0].Presumed != 512 {
		t.Errorf("the same prompt: winner %s presumed %d, want a:1 presuming 512", rs[0].Addr, rs[0].Presumed)
	}
}

func TestStateChunksStayBounded(t *testing.T) {
	// Prompts of 64 chunks each, on one endpoint, past maxChunks: the store never holds
	// more than maxChunks, and the latest prompt's chunks are kept.
	st := NewState()
	const per = 64
	var last []uint32
	for i := range maxChunks/per + 3 {
		last = prompt(per*presumeChunk, 0, uint32(i+1)<<20)
		st.Uncached("a:1", len(last))
		st.RoutedPrompt(uint64(i+1)<<8|1, "a:1", last, t0)
		if n := len(st.chunks); n > maxChunks {
			t.Fatalf("after %d prompts %d chunks, want at most %d", i+1, n, maxChunks)
		}
	}
	key := uint64(maxChunks/per+3)<<8 | 1
	in := Input{PromptTokens: len(last), PrefixKey: key, Tokens: last, Now: t0, Candidates: []Candidate{lcand("a:1", 0, 0, 0, 0)}}
	if rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(in); rs[0].Presumed != len(last) {
		t.Errorf("the latest prompt presumed %d, want %d", rs[0].Presumed, len(last))
	}
}
