package scoring

import (
	"testing"
	"time"
)

func TestTTFTAwareKVWaitSparesWhatARunningSequenceHolds(t *testing.T) {
	// a:1 holds 6,000 of the 6,500-token prompt in the index, its 18,640-token pool 80%
	// used by 2 running sequences (a 10 s decode each): the whole prompt does not fit, 500
	// tokens do. b:1 is empty. The prefix key's last request went to a:1 some time ago.
	const key = 0x5a7e
	for _, tt := range []struct {
		name   string
		ago    time.Duration
		want   string
		kvWait bool // a:1's
	}{
		{"routed 1 s ago: still running, its blocks shared", time.Second, "a:1", false},
		{"routed 20 s ago: finished, the whole prompt needs blocks", 20 * time.Second, "b:1", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			st.Uncached("a:1", 6500)
			st.Routed(key, "a:1", 6500, t0)
			a := lcand("a:1", 6000, 0, 2, 10*time.Second)
			a.Engine = EngineMetrics{Known: true, KVUsage: 0.8, Running: 2, KVPoolTokens: 18640}
			b := lcand("b:1", 0, 0, 0, 10*time.Second)
			b.Engine = EngineMetrics{Known: true, KVPoolTokens: 18640}
			rs := mustNew(t, "ttftaware", DefaultParams(), st).Rank(Input{PromptTokens: 6500, PrefixKey: key, Now: t0.Add(tt.ago), Candidates: []Candidate{a, b}})
			if rs[0].Addr != tt.want {
				t.Fatalf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
			for _, r := range rs {
				if r.Addr == "a:1" && (r.KVWait > 0) != tt.kvWait {
					t.Errorf("a:1 kv_wait %.3f s, want waiting %v", r.KVWait, tt.kvWait)
				}
			}
		})
	}
}

func TestSharedRunningCountsWhatTheRunningRequestShares(t *testing.T) {
	// A 6,000-token system prompt; this session's prompt is it and 2,000 tokens of its own,
	// 7,000 of which a:1 holds. Another session's first turn is it and 200 others.
	const key = 0x5a7e
	seq := func(from, n int) []uint32 {
		s := make([]uint32, n)
		for i := range s {
			s[i] = uint32(from + i)
		}
		return s
	}
	system := seq(1, 6000)
	prompt := append(append([]uint32(nil), system...), seq(100000, 2000)...)
	sibling := append(append([]uint32(nil), system...), seq(200000, 200)...)
	type routing struct {
		addr   string
		prompt []uint32
		at     time.Duration
	}
	for _, tt := range []struct {
		name   string
		routed []routing
		now    time.Duration
		want   int
	}{
		{"this session's previous turn, still running: all it holds of the prompt", []routing{{"a:1", prompt[:7000], 0}}, time.Second, 7000},
		{"another session's turn, still running: no more than the family's shortest prompt", []routing{{"a:1", sibling, 0}}, time.Second, 6200},
		{"finished (older than the decode pace): nothing", []routing{{"a:1", sibling, 0}}, 20 * time.Second, 0},
		{"the one before the key's last request, still running on a:1: the family's part", []routing{{"a:1", sibling, 0}, {"b:1", prompt[:7000], time.Second}}, 2 * time.Second, 6200},
		{"the key routed elsewhere only: nothing", []routing{{"b:1", sibling, 0}}, time.Second, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			for _, r := range tt.routed {
				st.RoutedPrompt(key, r.addr, r.prompt, t0.Add(r.at))
			}
			c := lcand("a:1", 7000, 0, 2, 10*time.Second)
			if got := sharedRunning(c, 7000, st.recent[key], prompt, t0.Add(tt.now)); got != tt.want {
				t.Errorf("sharedRunning = %d, want %d", got, tt.want)
			}
		})
	}
}
