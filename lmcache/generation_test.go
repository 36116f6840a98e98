package lmcache

import (
	"maps"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// gauge returns the value of the gauge name as reg exposes it, failing if it is not there.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s is not exposed", name)
	return 0
}

// TestSupersededGenerationLeavesTheGaugesAtOnce: when a registration retires a generation
// of keys (an instance re-registering from the same IP under a new id, a restart, ...),
// lookups stop crediting it and loadaware_lmcache_index_keys stops counting it in the same
// apply, while loadaware_lmcache_retired_keys counts what still awaits purge; the traffic
// that follows and then Sweep purge them, and the live count never moves when they do.
// Each prompt is 64 chunks, the old generation's 64 keys of the issue.
func TestSupersededGenerationLeavesTheGaugesAtOnce(t *testing.T) {
	p, q := prompt(1, 256*64), prompt(2, 256*64)
	hold := func(inst string, worker int, loc string, tokens []uint32, n int) []Message {
		return admits(t, inst, worker, loc, tokens, 0, n)
	}
	type stage struct {
		credits          map[string]int // Lookup(p): instance -> tokens
		keys, retiredNow int            // the two gauges
	}
	for _, tc := range []struct {
		name         string
		setup, reg   []Message // reg is the registration (or message) under test
		then         []Message // traffic after it
		atReg, after stage
		keysSwept    int // index_keys after Sweep (retired_keys is then 0)
	}{
		{name: "new id on the same IP, the old keys its own",
			setup: cat(regMsg("a", 0, "10.0.0.1"), hold("a", 0, "cpu", p, 64)),
			reg:   cat(regMsg("a2", 0, "10.0.0.1")),
			then:  hold("a2", 0, "cpu", q, 10), // 10 admits purge 20 of the 64
			atReg: stage{map[string]int{}, 0, 64}, after: stage{map[string]int{}, 10, 44}, keysSwept: 10},
		{name: "new id on the same IP, the old keys shared with another instance",
			setup: cat(regMsg("a", 0, "10.0.0.1"), hold("a", 0, "cpu", p, 64), regMsg("b", 0, "10.0.0.2"), hold("b", 0, "cpu", p, 64)),
			reg:   cat(regMsg("a2", 0, "10.0.0.1")),
			atReg: stage{map[string]int{"b": 256 * 64}, 64, 64}, after: stage{map[string]int{"b": 256 * 64}, 64, 64}, keysSwept: 64},
		{name: "new id on the same IP, then the same keys again",
			setup: cat(regMsg("a", 0, "10.0.0.1"), hold("a", 0, "cpu", p, 64)),
			reg:   cat(regMsg("a2", 0, "10.0.0.1")),
			then:  hold("a2", 0, "cpu", p, 64), // each admit purges 2: all gone after 32
			atReg: stage{map[string]int{}, 0, 64}, after: stage{map[string]int{"a2": 256 * 64}, 64, 0}, keysSwept: 64},
		{name: "new id on the same IP by heartbeat",
			setup: cat(regMsg("a", 0, "10.0.0.1"), hold("a", 0, "cpu", p, 64)),
			reg:   cat(hbMsg("a2", 0, "10.0.0.1")),
			atReg: stage{map[string]int{}, 0, 64}, after: stage{map[string]int{}, 0, 64}},
		{name: "the superseded generation keeps admitting",
			setup: cat(regMsg("a", 0, "10.0.0.1"), hold("a", 0, "cpu", p, 32)),
			reg:   cat(regMsg("a2", 0, "10.0.0.1")),
			then:  hold("a", 0, "cpu", p, 64), // refused (superseded), but each purges 2
			atReg: stage{map[string]int{}, 0, 32}, after: stage{map[string]int{}, 0, 0}},
		{name: "restart under the same id",
			setup: cat(regMsg("a", 0, "10.0.0.1"), hold("a", 0, "cpu", p, 64)),
			reg:   cat(regMsg("a", 0, "10.0.0.1")),
			then:  hold("a", 0, "cpu", p, 8),
			atReg: stage{map[string]int{}, 0, 64}, after: stage{map[string]int{"a": 256 * 8}, 8, 48}, keysSwept: 8},
		{name: "two workers and two locations superseded",
			setup: cat(regMsg("a", 0, "10.0.0.1"), regMsg("a", 1, "10.0.0.1"), hold("a", 0, "cpu", p, 64), hold("a", 1, "disk", p, 64), hold("a", 1, "cpu", q, 64)),
			reg:   cat(regMsg("a2", 0, "10.0.0.1")),
			atReg: stage{map[string]int{}, 0, 192}, after: stage{map[string]int{}, 0, 192}},
		{name: "deregistration drops at once",
			setup: cat(regMsg("a", 0, "10.0.0.1"), hold("a", 0, "cpu", p, 64), regMsg("b", 0, "10.0.0.2"), hold("b", 0, "cpu", q, 16)),
			reg:   cat(DeRegisterMsg{InstanceID: "a", WorkerID: 0}),
			atReg: stage{map[string]int{}, 16, 0}, after: stage{map[string]int{}, 16, 0}, keysSwept: 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			ix := newTestIndex(t, IndexConfig{Registerer: reg})
			applyAll(t, ix, tc.setup, t0)
			check := func(at string, want stage) {
				t.Helper()
				got := map[string]int{}
				for _, m := range ix.Lookup(p) {
					got[m.InstanceID] = m.Tokens
				}
				if !maps.Equal(got, want.credits) {
					t.Fatalf("%s: Lookup credits %v, want %v", at, got, want.credits)
				}
				keys, retired := gauge(t, reg, "loadaware_lmcache_index_keys"), gauge(t, reg, "loadaware_lmcache_retired_keys")
				if int(keys) != want.keys || int(retired) != want.retiredNow {
					t.Fatalf("%s: index_keys %v, retired_keys %v, want %d and %d", at, keys, retired, want.keys, want.retiredNow)
				}
				if live := liveKeys(t, ix); live != int(keys) {
					t.Fatalf("%s: index_keys %v, but %d keys have a live holder", at, keys, live)
				}
				checkCredit(t, ix, at)
			}
			applyAll(t, ix, tc.reg, t0)
			check("registered", tc.atReg)
			applyAll(t, ix, tc.then, t0)
			check("then", tc.after)
			ix.Sweep(t0)
			check("swept", stage{tc.after.credits, tc.keysSwept, 0})
		})
	}
}
