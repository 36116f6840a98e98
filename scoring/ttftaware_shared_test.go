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
