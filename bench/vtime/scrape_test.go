package vtime

import (
	"fmt"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/sim"
)

// The picker's arms that read engine metrics see them as a scrape on the 50 ms
// grid left them, aged to the decision; the others get no scrape grid at all.
func TestPickerArmsReadTheScrapeGrid(t *testing.T) {
	for _, tc := range []struct {
		policy string
		grid   bool
	}{{"gie-default", true}, {"llmd-precise", true}, {"loadaware", false}, {"dynamo-kv", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			cfg := small()
			w := &world{cfg: cfg, addrs: experiment.Addrs(2)}
			var err error
			if w.hasher, err = hasherFor(cfg); err != nil {
				t.Fatal(err)
			}
			if err := w.build(experiment.Arm{Name: tc.policy, Policy: tc.policy, Beta: 1}, 1); err != nil {
				t.Fatal(err)
			}
			defer w.close()
			if (w.scr != nil) != tc.grid {
				t.Fatalf("scrape grid %v; want %v", w.scr != nil, tc.grid)
			}
			if !tc.grid {
				return
			}
			v := engineView{w}
			if m := v.Engine(w.addrs[0], epoch); m.Known {
				t.Fatalf("before any scrape: %+v; want not known", m)
			}
			e := w.engines[0]
			for i := range 4 {
				if err := e.Add(&sim.Request{ID: fmt.Sprintf("load-%d", i), Tokens: make([]uint32, 2000), MaxTokens: 8}); err != nil {
					t.Fatal(err)
				}
			}
			if _, ok := e.Start(0); !ok {
				t.Fatal("engine 0 did not start a step")
			}
			e.Finish()
			w.now = 120 * time.Millisecond
			w.scrapeBeforePick() // the grid's 100 ms tick reads the engines as they are now
			m := v.Engine(w.addrs[0], epoch.Add(w.now))
			want := e.Metrics()
			if !m.Known || m.Running != want.Running || m.Waiting != want.Waiting || m.KVUsage != want.KVUsage || m.Age != 20*time.Millisecond {
				t.Fatalf("engine 0 at 120ms: %+v; want running %d, waiting %d, usage %v, age 20ms", m, want.Running, want.Waiting, want.KVUsage)
			}
			if m.Running+m.Waiting == 0 {
				t.Fatal("the loaded engine shows no requests")
			}
			if w.events.Len() != 1 || w.events[0].kind != evScrape || w.events[0].at != 150*time.Millisecond {
				t.Fatalf("events %v; want the next scrape at 150ms", w.events)
			}
			if m := v.Engine("10.9.9.9:1", epoch.Add(w.now)); m.Known {
				t.Fatalf("an address not simulated: %+v; want not known", m)
			}
		})
	}
}
