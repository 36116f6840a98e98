package scoring

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func addrs(rs []Ranked) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.Addr
	}
	return strings.Join(s, ",")
}

func mustNew(t testing.TB, name string, p Params, st *State) Policy {
	t.Helper()
	pol, err := New(name, p, st)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

func cand(addr string, matched, rank, inflight int) Candidate {
	return Candidate{Addr: addr, Matched: matched, HolderRank: rank, InFlight: inflight}
}

func TestLoadAwareRanking(t *testing.T) {
	tests := []struct {
		name       string
		beta       float64
		prompt     int
		cands      []Candidate
		wantOrder  string
		wantReason string
		wantScore  []float64 // in wantOrder order; nil = not checked
	}{
		{
			name: "crossover at beta 1: full hit 50% above the mean ties with an idle cold endpoint, smaller address wins (hit is smaller)",
			beta: 1, prompt: 1000,
			cands:      []Candidate{cand("10.0.0.1:8000", 1000, 0, 1), cand("10.0.0.2:8000", 0, -1, 0)},
			wantOrder:  "10.0.0.1:8000,10.0.0.2:8000",
			wantReason: ReasonCacheAffinity,
			wantScore:  []float64{0.5, 0.5},
		},
		{
			name: "crossover at beta 1: the same tie goes to the cold endpoint when its address is smaller",
			beta: 1, prompt: 1000,
			cands:      []Candidate{cand("10.0.0.2:8000", 1000, 0, 1), cand("10.0.0.1:8000", 0, -1, 0)},
			wantOrder:  "10.0.0.1:8000,10.0.0.2:8000",
			wantReason: ReasonLoadBalance,
			wantScore:  []float64{0.5, 0.5},
		},
		{
			name: "just past the crossover the cold endpoint wins",
			beta: 1, prompt: 1000,
			cands:      []Candidate{cand("10.0.0.1:8000", 999, 0, 1), cand("10.0.0.2:8000", 0, -1, 0)},
			wantOrder:  "10.0.0.2:8000,10.0.0.1:8000",
			wantReason: ReasonLoadBalance,
		},
		{
			name: "beta 0 is pure cache affinity however loaded the holder is",
			beta: 0, prompt: 100,
			cands:      []Candidate{cand("a:1", 100, 0, 50), cand("b:1", 0, -1, 0), cand("c:1", 50, 1, 0)},
			wantOrder:  "a:1,c:1,b:1",
			wantReason: ReasonCacheAffinity,
			wantScore:  []float64{1, 0.5, 0},
		},
		{
			name: "relative load uses max(1, mean): a lightly loaded fleet is not over-penalised",
			beta: 1, prompt: 100,
			cands:     []Candidate{cand("a:1", 100, 0, 1), cand("b:1", 0, -1, 0), cand("c:1", 0, -1, 0)},
			wantOrder: "a:1,b:1,c:1",
			// mean 1/3; a: 1 - (1-1/3)/1 = 1/3; b, c: 0 + 1/3.
			wantReason: ReasonCacheAffinity,
			wantScore:  []float64{1.0 / 3, 1.0 / 3, 1.0 / 3},
		},
		{
			name: "matched beyond the prompt is capped at a benefit of 1",
			beta: 1, prompt: 10,
			cands:      []Candidate{cand("a:1", 256, 0, 0), cand("b:1", 5, -1, 0)},
			wantOrder:  "a:1,b:1",
			wantReason: ReasonCacheAffinity,
			wantScore:  []float64{1, 0.5},
		},
		{
			name: "a busy holder loses to a partial holder at beta 2",
			beta: 2, prompt: 100,
			cands:      []Candidate{cand("a:1", 100, 0, 6), cand("b:1", 50, 1, 2)},
			wantOrder:  "b:1,a:1",
			wantReason: ReasonLoadBalance,
			// mean 4: a: 1 - 2*0.5 = 0; b: 0.5 - 2*(-0.5) = 1.5.
			wantScore: []float64{1.5, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, "loadaware", Params{Beta: tt.beta}, NewState())
			rs := p.Rank(Input{PromptTokens: tt.prompt, Now: t0, Candidates: tt.cands})
			if got := addrs(rs); got != tt.wantOrder {
				t.Fatalf("order = %s, want %s (%+v)", got, tt.wantOrder, rs)
			}
			if rs[0].Reason != tt.wantReason {
				t.Errorf("reason = %s, want %s", rs[0].Reason, tt.wantReason)
			}
			for i, w := range tt.wantScore {
				if math.Abs(rs[i].Score-w) > 1e-12 {
					t.Errorf("score[%d] (%s) = %v, want %v", i, rs[i].Addr, rs[i].Score, w)
				}
			}
		})
	}
}

func TestLoadAwareWithoutMatchesTakesTheFallback(t *testing.T) {
	st := NewState()
	p := mustNew(t, "loadaware", Params{Beta: 1}, st)
	in := Input{PromptTokens: 100, Now: t0, Candidates: []Candidate{cand("b:1", 0, -1, 0), cand("a:1", 0, -1, 9)}}
	rs := p.Rank(in)
	if rs[0].Reason != ReasonQPS || rs[0].Addr != "a:1" {
		t.Fatalf("got %s via %s, want a:1 via %s (never-sent endpoints first, by address)", rs[0].Addr, rs[0].Reason, ReasonQPS)
	}
	in.Session = "user-7"
	if rs := p.Rank(in); rs[0].Reason != ReasonSession {
		t.Fatalf("with a session key the fallback is the ring, got reason %s", rs[0].Reason)
	}
}

func TestKVAware(t *testing.T) {
	tests := []struct {
		name       string
		prompt     int
		threshold  int
		cands      []Candidate
		wantFirst  string
		wantReason string
	}{
		{"the first holder of chunk 0 wins even when busy", 1578, 2000,
			[]Candidate{cand("a:1", 256, 1, 0), cand("b:1", 1578, 0, 40)}, "b:1", ReasonCacheHolder},
		{"no holder: QPS fallback", 1578, 2000,
			[]Candidate{cand("a:1", 0, -1, 3), cand("b:1", 0, -1, 0)}, "a:1", ReasonQPS},
		{"a holder whose match is below prompt-threshold: fallback", 5000, 2000,
			[]Candidate{cand("b:1", 256, 0, 0), cand("a:1", 0, -1, 0)}, "a:1", ReasonQPS},
		{"a holder exactly at prompt-threshold is used", 5000, 2000,
			[]Candidate{cand("b:1", 3000, 0, 0), cand("a:1", 0, -1, 0)}, "b:1", ReasonCacheHolder},
		{"a larger match on a later holder does not matter", 1000, 2000,
			[]Candidate{cand("a:1", 1000, 1, 0), cand("b:1", 256, 0, 0)}, "b:1", ReasonCacheHolder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, "kvaware", Params{KVThreshold: tt.threshold}, NewState())
			rs := p.Rank(Input{PromptTokens: tt.prompt, Now: t0, Candidates: tt.cands})
			if rs[0].Addr != tt.wantFirst || rs[0].Reason != tt.wantReason {
				t.Fatalf("first = %s (%s), want %s (%s)", rs[0].Addr, rs[0].Reason, tt.wantFirst, tt.wantReason)
			}
			if len(rs) != len(tt.cands) {
				t.Fatalf("ranked %d of %d candidates", len(rs), len(tt.cands))
			}
		})
	}
}

func TestRoundRobinCyclesInAddressOrder(t *testing.T) {
	st := NewState()
	p := mustNew(t, "roundrobin", DefaultParams(), st)
	in := Input{Now: t0, Candidates: []Candidate{cand("c:1", 0, -1, 0), cand("a:1", 0, -1, 5), cand("b:1", 0, -1, 0)}}
	want := []string{"a:1,b:1,c:1", "b:1,c:1,a:1", "c:1,a:1,b:1", "a:1,b:1,c:1"}
	for i, w := range want {
		if got := addrs(p.Rank(in)); got != w {
			t.Fatalf("step %d: %s, want %s", i, got, w)
		}
	}
}

func TestLeastLoad(t *testing.T) {
	p := mustNew(t, "leastload", DefaultParams(), NewState())
	rs := p.Rank(Input{Candidates: []Candidate{cand("c:1", 0, -1, 2), cand("b:1", 0, -1, 1), cand("a:1", 0, -1, 1)}})
	if got := addrs(rs); got != "a:1,b:1,c:1" {
		t.Fatalf("order %s, want a:1,b:1,c:1 (fewest first, ties by address)", got)
	}
}

func TestQPSFallback(t *testing.T) {
	st := NewState()
	p := mustNew(t, "session", DefaultParams(), st)
	in := Input{Now: t0, Candidates: []Candidate{cand("a:1", 0, -1, 0), cand("b:1", 0, -1, 0), cand("c:1", 0, -1, 0)}}
	// Each never-served endpoint wins once, in address order.
	for i, w := range []string{"a:1", "b:1", "c:1"} {
		rs := p.Rank(in)
		if rs[0].Addr != w || rs[0].Reason != ReasonQPS {
			t.Fatalf("round %d: %s (%s), want %s", i, rs[0].Addr, rs[0].Reason, w)
		}
		st.Booked(rs[0].Addr, in.Now)
	}
	st.Booked("a:1", t0)
	st.Booked("c:1", t0)
	if rs := p.Rank(in); rs[0].Addr != "b:1" {
		t.Fatalf("lowest rate should win: got %s", rs[0].Addr)
	}
	// After the window passes, the old sends no longer count; all rates are zero again.
	in.Now = t0.Add(QPSWindow + time.Second)
	st.Booked("b:1", in.Now)
	if rs := p.Rank(in); rs[0].Addr != "a:1" {
		t.Fatalf("after the window a:1 and c:1 are at zero: got %s", rs[0].Addr)
	}
}

func TestSessionRingIsStickyAndConsistent(t *testing.T) {
	st := NewState()
	p := mustNew(t, "session", DefaultParams(), st)
	three := []Candidate{cand("10.0.0.1:8000", 0, -1, 0), cand("10.0.0.2:8000", 0, -1, 0), cand("10.0.0.3:8000", 0, -1, 0)}
	four := append(append([]Candidate(nil), three...), cand("10.0.0.4:8000", 0, -1, 0))
	counts := map[string]int{}
	moved := 0
	const users = 3000
	for u := 0; u < users; u++ {
		key := "user-" + string(rune('a'+u%26)) + "-" + itoa(u)
		a := p.Rank(Input{Session: key, Candidates: three})[0]
		if again := p.Rank(Input{Session: key, Candidates: three})[0]; again.Addr != a.Addr {
			t.Fatalf("key %s moved from %s to %s with the same fleet", key, a.Addr, again.Addr)
		}
		if a.Reason != ReasonSession {
			t.Fatalf("reason %s, want %s", a.Reason, ReasonSession)
		}
		counts[a.Addr]++
		b := p.Rank(Input{Session: key, Candidates: four})[0]
		if b.Addr != a.Addr {
			if b.Addr != "10.0.0.4:8000" {
				t.Fatalf("adding an endpoint moved key %s between old endpoints (%s -> %s)", key, a.Addr, b.Addr)
			}
			moved++
		}
	}
	for addr, n := range counts {
		if n < users/3*6/10 || n > users/3*14/10 {
			t.Errorf("%s owns %d of %d keys: the ring is lopsided", addr, n, users)
		}
	}
	if moved < users/4*5/10 || moved > users/4*15/10 {
		t.Errorf("adding a 4th endpoint moved %d of %d keys, want about a quarter", moved, users)
	}
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func TestNewRejectsBadInput(t *testing.T) {
	tests := []struct {
		name, policy string
		beta         float64
		st           *State
		wantErr      string
	}{
		{"unknown policy names the choices", "fastest", 1, NewState(), "use one of loadaware, kvaware"},
		{"negative beta", "loadaware", -1, NewState(), "out of range"},
		{"NaN beta", "loadaware", math.NaN(), NewState(), "out of range"},
		{"infinite beta", "loadaware", math.Inf(1), NewState(), "out of range"},
		{"nil state", "loadaware", 1, nil, "non-nil *State"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.policy, Params{Beta: tt.beta}, tt.st)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestEveryPolicyRanksEveryCandidateOnceAndIsDeterministic(t *testing.T) {
	cands := []Candidate{cand("d:1", 10, 2, 3), cand("a:1", 100, 0, 7), cand("c:1", 0, -1, 0), cand("b:1", 60, 1, 1)}
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			in := Input{PromptTokens: 100, Session: "s", Now: t0, Candidates: cands}
			r1 := mustNew(t, name, DefaultParams(), NewState()).Rank(in)
			r2 := mustNew(t, name, DefaultParams(), NewState()).Rank(in)
			if addrs(r1) != addrs(r2) {
				t.Fatalf("same input, different rankings: %s vs %s", addrs(r1), addrs(r2))
			}
			seen := map[string]bool{}
			for _, r := range r1 {
				seen[r.Addr] = true
			}
			if len(r1) != len(cands) || len(seen) != len(cands) {
				t.Fatalf("ranking %s is not a permutation of the candidates", addrs(r1))
			}
			if got := mustNew(t, name, DefaultParams(), NewState()).Rank(Input{Now: t0}); len(got) != 0 {
				t.Fatalf("no candidates should rank nothing, got %v", got)
			}
		})
	}
}
