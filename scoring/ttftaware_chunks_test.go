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
		evictA  bool // a pool's worth of other prompts' tokens routed to a:1 since its route
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
				st.RoutedPrompt(0x0e1c, "a:1", prompt(KVPoolTokens, 0, 8<<20), t0.Add(4*time.Second))
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

func TestTTFTAwareChunksHeldByDistinctTokensRoutedSince(t *testing.T) {
	// a:1's pool (16,000 tokens) took a 4,096-token prompt, then others; the prompt is held
	// while fewer distinct prompt tokens than the pool were routed there since (the
	// engine's LRU of blocks evicts it after a pool's worth of others were used), whatever
	// the picker booked as uncached.
	const key, pool = 0xa11, 16000
	held := prompt(4096, 0, 1<<20)
	hot := prompt(4096, 0, 2<<20) // another prefix, sent again and again
	tests := []struct {
		name     string
		then     func(st *State)
		usage    float64 // a:1's scraped KV usage
		presumed int
	}{
		{"nothing since", func(*State) {}, 0, 4096},
		// Three distinct prompts since (9,000 tokens), running and taking half the pool:
		// their blocks are among those counted, and the first prompt is held.
		{"the running sequences' blocks are the ones routed since", func(st *State) {
			for i := range 3 {
				st.RoutedPrompt(uint64(0xd1+i), "a:1", prompt(3000, 0, uint32(3+i)<<20), t0.Add(time.Duration(i+1)*time.Second))
			}
		}, 0.5, 4096},
		// The hot prompt routed 20 times (81,920 tokens) takes its 4,096 tokens' blocks
		// once: the first prompt is still held.
		{"one hot prompt again and again", func(st *State) {
			for i := range 20 {
				st.RoutedPrompt(0xb07, "a:1", hot, t0.Add(time.Duration(i+1)*time.Second))
			}
		}, 0, 4096},
		// Four distinct prompts of 4,096 tokens (16,384, past the pool): evicted, though
		// the picker booked them as cached.
		{"a pool of distinct prompts", func(st *State) {
			for i := range 4 {
				st.Uncached("a:1", 0)
				st.RoutedPrompt(uint64(0xd1+i), "a:1", prompt(4096, 0, uint32(3+i)<<20), t0.Add(time.Duration(i+1)*time.Second))
			}
		}, 0, 0},
		// 12,400 tokens since: the prompt's last chunk, freed first, is evicted first (a
		// route of the whole prompt no longer counts whole).
		{"a prompt's last chunk goes first", func(st *State) {
			for i := range 4 {
				st.RoutedPrompt(uint64(0xd1+i), "a:1", prompt(3100, 0, uint32(3+i)<<20), t0.Add(time.Duration(i+1)*time.Second))
			}
		}, 0, 3840},
		// The held prompt routed again after three of them: it is behind them in the LRU,
		// and the fourth leaves it held.
		{"routed again in between", func(st *State) {
			for i := range 4 {
				if i == 3 {
					st.RoutedPrompt(key, "a:1", held, t0.Add(10*time.Second))
				}
				st.RoutedPrompt(uint64(0xd1+i), "a:1", prompt(4096, 0, uint32(3+i)<<20), t0.Add(time.Duration(i+1)*time.Second))
			}
		}, 0, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("a:1", len(held))
			st.RoutedPrompt(key, "a:1", held, t0)
			tt.then(st)
			a := lcand("a:1", 0, 0, 0, 0)
			a.Engine = EngineMetrics{Known: true, KVPoolTokens: pool, KVUsage: tt.usage}
			in := Input{PromptTokens: len(held), PrefixKey: key, Tokens: held, Now: t0.Add(time.Minute), Candidates: []Candidate{a, lcand("b:1", 0, 0, 0, 0)}}
			for _, r := range mustNew(t, "ttftaware", DefaultParams(), st).Rank(in) {
				if want := map[string]int{"a:1": tt.presumed}[r.Addr]; r.Presumed != want {
					t.Errorf("%s presumed %d, want %d", r.Addr, r.Presumed, want)
				}
			}
		})
	}
}

func TestChunkLRUSince(t *testing.T) {
	type op struct {
		take  int    // tokens of a new position (0: none)
		leave uint64 // a position to leave (0: none)
	}
	tests := []struct {
		name  string
		base  uint64
		ops   []op
		pos   uint64
		since float64
	}{
		{"the last position", 0, []op{{take: 256}, {take: 256}}, 2, 0},
		{"the positions after it", 0, []op{{take: 256}, {take: 100}, {take: 256}}, 1, 356},
		{"a position left weighs nothing", 0, []op{{take: 256}, {take: 256}, {take: 256}, {leave: 2}}, 1, 256},
		{"left twice, once counted", 0, []op{{take: 256}, {take: 256}, {leave: 2}, {leave: 2}, {take: 7}}, 1, 7},
		{"not taken yet", 0, []op{{take: 256}}, 2, -1},
		{"another life's", 5, []op{{take: 256}, {take: 256}}, 5, -1},
		{"this life's", 5, []op{{take: 256}, {take: 256}}, 6, 256},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newChunkLRU(tt.base)
			for _, o := range tt.ops {
				if o.take > 0 {
					l.take(o.take)
				}
				if o.leave > 0 {
					l.leave(o.leave)
				}
			}
			if got := l.since(tt.pos); got != tt.since {
				t.Errorf("since(%d) = %v, want %v", tt.pos, got, tt.since)
			}
		})
	}
}

func TestChunkLRUWraps(t *testing.T) {
	// Past lruSpan positions the ring forgets the eldest: a position still in it counts
	// the positions after it, across the wrap; one forgotten holds nothing, and leaving it
	// changes nothing.
	l := newChunkLRU(0)
	for range lruSpan + 10 {
		l.take(2)
	}
	if got, want := l.since(l.seq-lruSpan+1), float64(2*(lruSpan-1)); got != want {
		t.Errorf("the eldest kept: since %v, want %v", got, want)
	}
	if got, want := l.since(l.seq-20), 40.0; got != want {
		t.Errorf("across the wrap: since %v, want %v", got, want)
	}
	l.leave(3)
	if got := l.since(3); got != -1 {
		t.Errorf("forgotten: since %v, want -1", got)
	}
	if got, want := l.since(l.seq-20), 40.0; got != want {
		t.Errorf("after leaving a forgotten position: since %v, want %v", got, want)
	}
}

func TestChunkHashesRankedAreTheOnesRecorded(t *testing.T) {
	// A prompt ranked and then booked is recorded under the chunk hashes the ranking
	// computed (chunkChain); a prompt recorded without a ranking before it, or after the
	// ranking of another prompt of the same key and length in other memory, under its own.
	const key = 0xc4a1
	cands := []Candidate{lcand("a:1", 0, 0, 0, 0), lcand("b:1", 0, 0, 0, 0)}
	ranked := prompt(1578, 700, 1<<20)
	other := prompt(1578, 700, 2<<20)
	record := func(rank bool) map[uint64]heldChunk {
		st := NewState()
		if rank {
			st.RoutedPrompt(key, "b:1", ranked, t0) // something to presume: the chain is read past the first chunk
			p := mustNew(t, "ttftaware", DefaultParams(), st)
			p.Rank(Input{PromptTokens: len(ranked), PrefixKey: key, Tokens: ranked, Now: t0, Candidates: cands})
			st.RoutedPrompt(key, "a:1", ranked, t0)
			p.Rank(Input{PromptTokens: len(ranked), PrefixKey: key, Tokens: ranked, Now: t0, Candidates: cands})
			st.RoutedPrompt(key, "a:1", other, t0)
		} else {
			st.RoutedPrompt(key, "b:1", ranked, t0)
			st.RoutedPrompt(key, "a:1", ranked, t0)
			st.RoutedPrompt(key, "a:1", other, t0)
		}
		return st.chunks
	}
	got, want := record(true), record(false)
	if len(got) != len(want) || len(want) != 10 { // of the 6 full chunks of each, the first 2 shared
		t.Fatalf("%d chunks recorded after ranking, %d without, want 10", len(got), len(want))
	}
	for h, c := range want {
		if g, ok := got[h]; !ok || g.holders != c.holders {
			t.Errorf("chunk %x: after ranking %+v, without %+v", h, g, c)
		}
	}
}

func TestChunkLRUAtIsTheWeightAtAnIndex(t *testing.T) {
	// at(i) reads one ring index's weight from the tree: prefix(i+1) - prefix(i), at every
	// index, across the ring's wrap and after positions were left.
	l := newChunkLRU(0)
	for n := range lruSpan + 300 {
		pos := l.take(n%256 + 1)
		if n%3 == 0 {
			l.leave(pos - 1)
		}
	}
	for i := range lruSpan {
		if got, want := l.at(i), l.prefix(i+1)-l.prefix(i); got != want {
			t.Fatalf("at(%d) = %v, want %v", i, got, want)
		}
	}
}

// take gives l's next position tokens' weight and returns it, as recordChunks does for a
// prompt's tokens past its last full chunk.
func (l *chunkLRU) take(tokens int) uint64 {
	pos := l.reserve(1)
	l.put(pos, tokens)
	return pos
}
