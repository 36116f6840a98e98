package lmcache

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// checkCredit recomputes from scratch what settle keeps incrementally, and fails on any
// difference: the IPs in conflict, every instance's state and counts, and the view entry
// of every live slot (credited to its instance exactly when that instance is active).
func checkCredit(t *testing.T, ix *Index, step string) {
	t.Helper()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	conflicted := map[string]bool{}
	for _, inst := range ix.instances {
		if c := ix.ipClaims[inst.ip]; inst.conflict && c != nil && c != inst {
			conflicted[inst.ip] = true
		}
	}
	if len(conflicted) != len(ix.credit.conflicted) {
		t.Fatalf("%s: conflicted IPs %v, recomputed %v", step, ix.credit.conflicted, conflicted)
	}
	for ip := range conflicted {
		if !ix.credit.conflicted[ip] {
			t.Fatalf("%s: %s is in conflict but not marked", step, ip)
		}
	}
	counts := map[InstanceState]int{}
	v := ix.view.Load()
	for _, inst := range ix.instances {
		st := ix.state(inst)
		counts[st]++
		if inst.state != st {
			t.Fatalf("%s: instance %s kept as %s, is %s", step, inst.id, inst.state, st)
		}
		if (inst.iv != nil) != (st == StateActive) || (inst.iv != nil && inst.iv.ip != inst.ip) {
			t.Fatalf("%s: instance %s (%s, ip %s) has view entry %+v", step, inst.id, st, inst.ip, inst.iv)
		}
		for _, w := range inst.workers {
			for _, s := range w.slots {
				if got := v.get(s.id); got != inst.iv {
					t.Fatalf("%s: slot %d of %s credits %+v, want %+v", step, s.id, inst.id, got, inst.iv)
				}
			}
		}
	}
	for _, st := range []InstanceState{StateActive, StateNoIP, StateSuperseded, StateConflict} {
		if counts[st] != ix.credit.counts[st] {
			t.Fatalf("%s: %d instances %s, counted %d", step, counts[st], st, ix.credit.counts[st])
		}
		if g := testutil.ToFloat64(ix.met.instances.WithLabelValues(string(st))); int(g) != counts[st] {
			t.Fatalf("%s: gauge %s = %v, want %d", step, st, g, counts[st])
		}
	}
}

// Random registrations, heartbeats (IP changes included), deregistrations, admits from
// registered and unregistered instances, and sweeps, over few IPs so that supersedes and
// conflicts happen often: after every step the incremental credit equals a recount.
func TestCreditStaysEqualToARecount(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			ix := newTestIndex(t, IndexConfig{HeartbeatTimeout: 10 * time.Second})
			now := t0
			for step := range 1500 {
				inst, w := fmt.Sprint("i", r.IntN(6)), r.IntN(2)
				ip := fmt.Sprint("10.0.0.", r.IntN(3)+1)
				var msg Message
				switch x := r.IntN(100); {
				case x < 15:
					msg = RegisterMsg{InstanceID: inst, WorkerID: w, IP: ip, Port: 8000}
				case x < 30:
					msg = HeartbeatMsg{InstanceID: inst, WorkerID: w, IP: ip, Port: 8000}
				case x < 36:
					msg = DeRegisterMsg{InstanceID: inst, WorkerID: w}
				case x < 80:
					msg = KVAdmitMsg{InstanceID: inst, WorkerID: w, Key: int64(r.IntN(20)), Location: []string{"cpu", "disk"}[r.IntN(2)]}
				case x < 95:
					msg = KVEvictMsg{InstanceID: inst, WorkerID: w, Key: int64(r.IntN(20)), Location: "cpu"}
				default:
					now = now.Add(7 * time.Second)
					ix.Sweep(now)
					checkCredit(t, ix, fmt.Sprintf("step %d (sweep)", step))
					continue
				}
				if err := ix.Apply(msg, now); err != nil {
					t.Fatal(err)
				}
				checkCredit(t, ix, fmt.Sprintf("step %d (%#v)", step, msg))
			}
		})
	}
}
