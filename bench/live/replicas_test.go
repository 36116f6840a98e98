package live

import (
	"context"
	"fmt"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

// TestSharedReplicasDecideAsOnePicker sends the sequential seed (no request overlaps the
// next, every message heard by every replica before the next is sent) through 2 and 3
// shared replicas, requests spread over them in turn, and through the naive deployment:
// the shared replicas must choose the engine a single picker chooses (virtual time) for
// every request, under kvaware, loadaware and latencyaware. That covers the cache view
// (each engine pushes to one replica), the load view and the routing history (the QPS
// fallback's counts, latencyaware's last route of a prefix), which each replica would
// otherwise keep of its own requests only. Under kvaware and loadaware the naive replicas
// must differ somewhere, or the seed could not tell a shared view from a partial one
// (latencyaware chose alike on this seed even when naive, so its naive run is not checked).
func TestSharedReplicasDecideAsOnePicker(t *testing.T) {
	if testing.Short() {
		t.Skip("live replicas: seconds of wall clock")
	}
	cfg, seed, reqs := sequentialSeed(t)
	arms := []experiment.Arm{
		{Name: "kvaware", Policy: "kvaware"},
		{Name: "loadaware-b1", Policy: "loadaware", Beta: 1},
		{Name: "latencyaware", Policy: "latencyaware", Beta: 1},
	}
	for _, arm := range arms {
		vt, err := vtime.RunRequests(context.Background(), cfg, arm, seed, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{2, 3} {
			for _, naive := range []bool{false, true} {
				if naive && (n == 3 || arm.Policy == "latencyaware") {
					continue
				}
				name := fmt.Sprintf("%s/%d-shared", arm.Name, n)
				if naive {
					name = fmt.Sprintf("%s/%d-naive", arm.Name, n)
				}
				t.Run(name, func(t *testing.T) {
					lv, err := Run(context.Background(), cfg, arm, seed, Options{WarmUp: vtime.WarmUp, Requests: reqs, Sequential: true, Replicas: n, Naive: naive, Explain: func(int) bool { return true }})
					if err != nil {
						t.Fatal(err)
					}
					differ := 0
					for i, c := range choices(t, vt, lv) {
						if c.same() {
							continue
						}
						differ++
						if !naive {
							t.Errorf("request %d (prefix %d, replica %d): one picker chose engine %d (%s), the replicas engine %d (%s; %s)",
								i, reqs[i].PrefixID, i%n, c.v, vt.Rows[i].Engine, c.l, lv.Run.Rows[i].Engine, lv.Decisions[i])
						}
					}
					if naive && differ == 0 {
						t.Errorf("the naive replicas chose as one picker for all %d requests: the seed does not exercise the shared state", len(reqs))
					}
				})
			}
		}
	}
}
