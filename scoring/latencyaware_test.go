package scoring

import (
	"testing"
	"time"
)

func lcand(addr string, matched, prefill, decode int, pace time.Duration) Candidate {
	return Candidate{Addr: addr, Matched: matched, HolderRank: -1, InFlight: prefill + decode,
		Prefill: prefill, Decode: decode, DecodePace: pace}
}

func TestLatencyAwareRanking(t *testing.T) {
	tests := []struct {
		name       string
		prompt     int
		cands      []Candidate
		want       string
		wantReason string
	}{
		{"equal in flight: the one with fewer requests awaiting a first token wins", 1000,
			[]Candidate{lcand("a:1", 1000, 3, 7, 0), lcand("b:1", 1000, 1, 9, 0)}, "b:1", ReasonCacheAffinity},
		{"a miss past one step's budget counts: a 30,000-token prompt stays with its busy holder", 30000,
			[]Candidate{lcand("a:1", 30000, 0, 40, 0), lcand("b:1", 0, 0, 5, 0)}, "a:1", ReasonCacheAffinity},
		{"a miss within one step's budget is not charged: the light non-holder takes a copy", 1600,
			[]Candidate{lcand("a:1", 1600, 0, 40, 0), lcand("b:1", 0, 0, 5, 0)}, "b:1", ReasonLoadBalance},
		{"a slower measured pace makes the same load heavier", 1000,
			[]Candidate{lcand("a:1", 1000, 0, 10, 3*time.Second), lcand("b:1", 1000, 0, 11, 2*time.Second)}, "b:1", ReasonCacheAffinity},
		{"an unmeasured endpoint counts at the mean pace", 1000,
			[]Candidate{lcand("a:1", 1000, 0, 10, 0), lcand("b:1", 1000, 0, 10, 2*time.Second)}, "a:1", ReasonCacheAffinity},
		{"the full holder wins over a moderately lighter non-holder", 1000,
			[]Candidate{lcand("a:1", 1000, 0, 12, 0), lcand("b:1", 0, 0, 8, 0)}, "a:1", ReasonCacheAffinity},
		{"a heavily loaded holder loses: load-balance", 1000,
			[]Candidate{lcand("a:1", 1000, 2, 30, 0), lcand("b:1", 0, 0, 4, 0)}, "b:1", ReasonLoadBalance},
		{"nobody holds the prompt: the load alone decides, no QPS fallback", 1000,
			[]Candidate{lcand("a:1", 0, 0, 9, 0), lcand("b:1", 0, 0, 3, 0)}, "b:1", ReasonLeastLoad},
		{"equal everything: the smallest address", 1000,
			[]Candidate{lcand("b:1", 500, 1, 4, 0), lcand("a:1", 500, 1, 4, 0)}, "a:1", ReasonCacheAffinity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := mustNew(t, "latencyaware", DefaultParams(), NewState()).Rank(Input{PromptTokens: tt.prompt, Now: t0, Candidates: tt.cands})
			if len(rs) != len(tt.cands) {
				t.Fatalf("ranked %d of %d", len(rs), len(tt.cands))
			}
			if rs[0].Addr != tt.want || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want %s (%s): %+v", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason, rs)
			}
			for _, r := range rs {
				if r.Load < 0 || (r.Load == 0 && r.InFlight > 0) {
					t.Errorf("%s: load %v with %d in flight: the weighted load is what the explain header shows", r.Addr, r.Load, r.InFlight)
				}
			}
		})
	}
}

func TestLatencyAwareColdPrefixAffinity(t *testing.T) {
	even := []Candidate{lcand("a:1", 1000, 0, 10, 0), lcand("b:1", 1000, 0, 10, 0)}
	const key = 42
	tests := []struct {
		name    string
		history []time.Duration // Routed(key, "b:1") at t0 + each
		at      time.Duration
		want    string
	}{
		{"no history: the smallest address", nil, 0, "a:1"},
		{"a cold prefix returns to where it went last", []time.Duration{0}, 5 * time.Second, "b:1"},
		{"past the affinity window the credit is gone", []time.Duration{0}, AffinityWindow + time.Second, "a:1"},
		{"a hot prefix gets no affinity: load alone balances it",
			[]time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}, 500 * time.Millisecond, "a:1"},
		{"a prefix that cooled down gets it back",
			[]time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}, 30 * time.Second, "b:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := NewState()
			for _, d := range tt.history {
				st.Routed(key, "b:1", 0, t0.Add(d))
			}
			rs := mustNew(t, "latencyaware", DefaultParams(), st).Rank(Input{PromptTokens: 1000, PrefixKey: key, Now: t0.Add(tt.at), Candidates: even})
			if rs[0].Addr != tt.want {
				t.Fatalf("winner %s, want %s: %+v", rs[0].Addr, tt.want, rs)
			}
		})
	}
}

func TestRoutedHistoryIsBounded(t *testing.T) {
	st := NewState()
	for k := uint64(1); k <= maxRecent+10; k++ {
		st.Routed(k, "a:1", 0, t0)
	}
	if n := len(st.recent); n > maxRecent {
		t.Fatalf("%d keys remembered, bound is %d", n, maxRecent)
	}
	st.Routed(0, "a:1", 0, t0)
	if _, ok := st.recent[0]; ok {
		t.Error("key 0 (no tokens) must record nothing")
	}
}
