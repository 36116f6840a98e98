package lmcache

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// liveKeys counts the keys of the table held by at least one live slot (not retired), and
// checks the retired queue's bookkeeping: every retired slot is out of slotByID and of its
// worker, credits nobody in the view, and retiredKeys is the sum of their keys.
func liveKeys(t testing.TB, ix *Index) int {
	t.Helper()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	sum := 0
	v := ix.view.Load()
	for _, s := range ix.retired[ix.retiredHead:] {
		sum += len(s.keys)
		if ix.slotByID[s.id] != nil || s.w.slots[s.loc] == s {
			t.Fatalf("retired slot %d of %s is still live", s.id, s.w.inst.id)
		}
		if iv := v.get(s.id); iv != nil {
			t.Fatalf("retired slot %d of %s credits %+v", s.id, s.w.inst.id, iv)
		}
	}
	if sum != ix.retiredKeys {
		t.Fatalf("retired slots hold %d keys, counted %d", sum, ix.retiredKeys)
	}
	live := 0
	var ids []uint32
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.RLock()
		for _, h := range sh.m {
			ids = sh.appendTo(h, ids[:0])
			if slices.ContainsFunc(ids, func(id uint32) bool { return ix.slotByID[id] != nil }) {
				live++
			}
		}
		sh.mu.RUnlock()
	}
	return live
}

// TestRetiredSlotsAreNeverCredited registers over holders (a supersede, a restart, and the
// cases around them) and checks, before any of the old slots' keys are purged, halfway
// and after all are, that lookups credit exactly the instances they would if the keys had
// been dropped at once, and that the table ends with exactly the live keys.
func TestRetiredSlotsAreNeverCredited(t *testing.T) {
	p, q := prompt(1, 256*40), prompt(2, 256*40) // 40 chunks each
	hold := func(inst string, tokens []uint32) []Message { return admits(t, inst, 0, "cpu", tokens, 0, 40) }
	type want map[string]int // instance -> tokens matched of p
	for _, tc := range []struct {
		name    string
		setup   []Message // applied first; the last message is the registration under test
		want    want      // Lookup(p) once it has been applied
		keys    int       // live keys then
		retired int       // keys of retired slots left in the table then
	}{
		{"supersede", cat(regMsg("a", 0, "10.0.0.1"), hold("a", p), regMsg("b", 0, "10.0.0.2"), hold("b", p),
			regMsg("a2", 0, "10.0.0.1")), want{"b": 256 * 40}, 40, 40},
		{"supersede of the only holder", cat(regMsg("a", 0, "10.0.0.1"), hold("a", p), hold("a", q),
			regMsg("a2", 0, "10.0.0.1")), want{}, 0, 80},
		{"restart", cat(regMsg("a", 0, "10.0.0.1"), hold("a", p), regMsg("b", 0, "10.0.0.2"), hold("b", p),
			regMsg("a", 0, "10.0.0.1")), want{"b": 256 * 40}, 40, 40},
		{"restart, then the same keys again", cat(regMsg("a", 0, "10.0.0.1"), hold("a", p), regMsg("a", 0, "10.0.0.1"),
			admits(t, "a", 0, "cpu", p, 0, 10)), want{"a": 256 * 10}, 10, 0},
		{"superseded one takes its IP back", cat(regMsg("a", 0, "10.0.0.1"), hold("a", p), regMsg("a2", 0, "10.0.0.1"),
			DeRegisterMsg{InstanceID: "a2"}, regMsg("a", 0, "10.0.0.1")), want{}, 0, 0},
		{"superseded one comes back and holds again", cat(regMsg("a", 0, "10.0.0.1"), hold("a", p), regMsg("a2", 0, "10.0.0.1"),
			DeRegisterMsg{InstanceID: "a2"}, regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 5)), want{"a": 256 * 5}, 5, 0},
		{"superseded then in conflict", cat(regMsg("a", 0, "10.0.0.1"), hold("a", p), regMsg("a2", 0, "10.0.0.1"),
			hold("a2", p), hold("a", p)), want{}, 40, 0},
		{"two workers superseded", cat(regMsg("a", 0, "10.0.0.1"), regMsg("a", 1, "10.0.0.1"), hold("a", p),
			admits(t, "a", 1, "disk", q, 0, 40), regMsg("a2", 0, "10.0.0.1")), want{}, 0, 80},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, IndexConfig{})
			// Register straight to the table: no key traffic purges on its own here.
			ix.mu.Lock()
			for i, m := range tc.setup {
				if err := ix.applyLocked(m, t0, ""); err != nil {
					t.Fatal(err)
				}
				if i < len(tc.setup)-1 {
					ix.purge(-1) // all but the registration under test purge at once
				}
			}
			ix.mu.Unlock()
			check := func(stage string) {
				t.Helper()
				got := want{}
				for _, m := range ix.Lookup(p) {
					got[m.InstanceID] = m.Tokens
				}
				if len(got) != len(tc.want) {
					t.Fatalf("%s: Lookup credits %v, want %v", stage, got, tc.want)
				}
				for id, n := range tc.want {
					if got[id] != n {
						t.Fatalf("%s: Lookup credits %v, want %v", stage, got, tc.want)
					}
				}
				if n := liveKeys(t, ix); n != tc.keys {
					t.Fatalf("%s: %d live keys, want %d", stage, n, tc.keys)
				}
				checkCredit(t, ix, stage)
			}
			check("applied")
			if ix.retiredKeys != tc.retired {
				t.Fatalf("applied: %d keys of retired slots left, want %d", ix.retiredKeys, tc.retired)
			}
			ix.mu.Lock()
			pending := ix.retiredKeys
			ix.purge(pending / 2)
			ix.mu.Unlock()
			check("half purged")
			ix.Sweep(t0)
			check("swept")
			if ix.Keys() != tc.keys || ix.retiredKeys != 0 || len(ix.retired) != 0 || ix.retiredHead != 0 {
				t.Fatalf("swept: %d keys (want %d), %d retired keys in %d slots", ix.Keys(), tc.keys, ix.retiredKeys, len(ix.retired))
			}
		})
	}
}

// TestRegistrationsRetireAndTrafficPurges checks where the old slots' keys go: a restart
// or a supersede retires them without touching the key table (Keys drops them, RetiredKeys
// counts them), each key
// operation then purges at most purgePerOp of them, and Sweep the rest.
func TestRegistrationsRetireAndTrafficPurges(t *testing.T) {
	for _, tc := range []struct {
		name string
		reg  Message
	}{
		{"restart", regMsg("a", 0, "10.0.0.1")},
		{"supersede", regMsg("a2", 0, "10.0.0.1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, IndexConfig{})
			applyAll(t, ix, cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", prompt(1, 256*100), 0, 100)), t0)
			applyAll(t, ix, []Message{tc.reg}, t0)
			if ix.Keys() != 0 || ix.RetiredKeys() != 100 || ix.nkeys.Load() != 100 || liveKeys(t, ix) != 0 {
				t.Fatalf("after the registration: %d keys, %d retired, %d in the table, want 0, 100 and 100", ix.Keys(), ix.RetiredKeys(), ix.nkeys.Load())
			}
			if got := testutil.ToFloat64(ix.trust.swept); tc.name == "supersede" && got != 100 {
				t.Fatalf("swept %v keys, want 100 counted at the supersede", got)
			}
			other := prompt(2, 256*30)
			applyAll(t, ix, cat(regMsg("b", 0, "10.0.0.2")), t0) // registrations purge nothing
			if ix.retiredKeys != 100 {
				t.Fatalf("a registration purged: %d retired keys left, want 100", ix.retiredKeys)
			}
			for i, m := range admits(t, "b", 0, "cpu", other, 0, 30) {
				applyAll(t, ix, []Message{m}, t0)
				if want := 100 - purgePerOp*(i+1); ix.retiredKeys != max(0, want) {
					t.Fatalf("after %d admits: %d retired keys left, want %d", i+1, ix.retiredKeys, max(0, want))
				}
			}
			// A batch purges for each of its operations (batch adds a fifth, an evict).
			applyAll(t, ix, []Message{batch(t, "b", prompt(3, 256*10), []OpType{OpAdmit, OpAdmit, OpAdmit, OpEvict})}, t0)
			if want := max(0, 100-purgePerOp*(30+5)); ix.retiredKeys != want {
				t.Fatalf("after the batch: %d retired keys left, want %d", ix.retiredKeys, want)
			}
			if ix.Sweep(t0.Add(time.Second)); ix.retiredKeys != 0 || ix.Keys() != liveKeys(t, ix) {
				t.Fatalf("swept: %d retired keys, %d keys of which %d live", ix.retiredKeys, ix.Keys(), liveKeys(t, ix))
			}
		})
	}
}

// TestSweepPurgesWithoutHeartbeatTimeout: a negative HeartbeatTimeout turns expiry off,
// not the purge.
func TestSweepPurgesWithoutHeartbeatTimeout(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{HeartbeatTimeout: -1})
	applyAll(t, ix, cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", prompt(1, 256*20), 0, 20), regMsg("a2", 0, "10.0.0.1")), t0)
	if ix.nkeys.Load() != 20 || ix.RetiredKeys() != 20 {
		t.Fatalf("%d keys in the table and %d retired before the sweep, want the 20 retired ones", ix.nkeys.Load(), ix.RetiredKeys())
	}
	if n := ix.Sweep(t0.Add(time.Hour)); n != 0 || ix.nkeys.Load() != 0 || ix.RetiredKeys() != 0 {
		t.Fatalf("Sweep expired %d and left %d keys in the table, %d retired, want 0, 0 and 0", n, ix.nkeys.Load(), ix.RetiredKeys())
	}
}

// TestBudgetPurgesRetiredKeysFirst: over the key budget, the keys of retired slots go
// before any live key is evicted.
func TestBudgetPurgesRetiredKeysFirst(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{MaxKeys: 100})
	applyAll(t, ix, cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", prompt(1, 256*60), 0, 60),
		regMsg("a2", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.2")), t0)
	// 60 retired; b's 70 admits purge 2 each at most, so the budget is crossed with
	// retired keys left.
	live := prompt(2, 256*70)
	applyAll(t, ix, admits(t, "b", 0, "cpu", live, 0, 70), t0)
	if got := testutil.ToFloat64(ix.trust.evicted); got != 0 {
		t.Fatalf("the budget evicted %v live keys while retired ones were left", got)
	}
	if got := ix.Lookup(live); len(got) != 1 || got[0].Tokens != 256*70 {
		t.Fatalf("b's keys: %+v, want all 70 chunks", got)
	}
	if ix.Keys() != 70 || ix.retiredKeys != 0 {
		t.Fatalf("%d keys, %d retired, want 70 and 0", ix.Keys(), ix.retiredKeys)
	}
}

// TestRetiredSlotsAtScale supersedes and restarts holders of a shared prompt among 300
// instances, with key traffic in between, and checks after each registration that the
// prompt's holders are exactly the live holders, in order.
func TestRetiredSlotsAtScale(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{})
	p := prompt(9, 256*7)
	ip := func(i int) string { return fmt.Sprintf("10.2.%d.%d", i>>8&255, i&255+1) }
	var holders []string         // in HolderRank order
	owner := map[string]string{} // IP -> the instance that holds on it
	for i := range 300 {
		id := fmt.Sprintf("i-%d", i)
		applyAll(t, ix, cat(regMsg(id, 0, ip(i)), admits(t, id, 0, "cpu", p, 0, 7)), t0)
		holders = append(holders, id)
		owner[ip(i)] = id
	}
	for i := range 200 {
		at := ip(3 * (i % 100))
		old, id := owner[at], owner[at] // odd: a restart
		if i%2 == 0 {
			id = fmt.Sprintf("s-%d", i) // even: a supersede
		}
		applyAll(t, ix, []Message{regMsg(id, 0, at)}, t0)
		holders = slices.DeleteFunc(holders, func(x string) bool { return x == old })
		var got []string
		for _, m := range ix.Lookup(p) {
			got = append(got, m.InstanceID)
		}
		if !slices.Equal(got, holders) {
			t.Fatalf("registration %d (%s on %s): holders %v, want %v", i, id, at, got, holders)
		}
		applyAll(t, ix, admits(t, id, 0, "cpu", p, 0, 7), t0) // 7 ops: purge up to 14 keys
		holders = append(holders, id)
		owner[at] = id
	}
	ix.Sweep(t0)
	if n := liveKeys(t, ix); ix.Keys() != n || n != 7 {
		t.Fatalf("swept: %d keys, %d live, want 7", ix.Keys(), n)
	}
	checkCredit(t, ix, "swept")
}
