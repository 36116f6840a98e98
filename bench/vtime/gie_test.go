package vtime

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/peers/gie"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// engines lists each row's engine, in request order.
func engines(run experiment.Run) []string {
	out := make([]string, len(run.Rows))
	for i, r := range run.Rows {
		out[i] = r.Engine
	}
	return out
}

func TestGIEArmIsRepeatableAndSpreadsLoad(t *testing.T) {
	cfg := small()
	arm, err := experiment.ParseArms("gie")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Arms = arm
	cfg.Workload.Requests = 60
	cfg.Warmup = 0
	a, err := RunOne(context.Background(), cfg, arm[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	b, err := RunOne(context.Background(), cfg, arm[0], 3)
	if err != nil {
		t.Fatal(err)
	}
	ea, eb := engines(a), engines(b)
	if len(ea) != cfg.Workload.Requests {
		t.Fatalf("%d rows, want %d", len(ea), cfg.Workload.Requests)
	}
	per := map[string]int{}
	for i := range ea {
		if ea[i] != eb[i] {
			t.Fatalf("request %d went to %s, then to %s on the same seed", i, ea[i], eb[i])
		}
		if ea[i] == "" {
			t.Fatalf("request %d was not routed: %s", i, a.Rows[i].Error)
		}
		per[ea[i]]++
	}
	// GIE's queue and KV scorers see the load its prefix scorer would pile
	// onto one engine: every engine serves part of the seed.
	for _, addr := range experiment.Addrs(cfg.Engines) {
		if per[addr] == 0 {
			t.Errorf("engine %s got no request (per engine: %v)", addr, per)
		}
	}
}

// TestGIEArmScrapesOnGIERefreshGrid checks the gie arm's metrics: GIE sees
// each engine as a scrape on the 50 ms grid left it (stale in between), and
// once a scrape shows one engine loaded it routes an unheld prompt to the other.
func TestGIEArmScrapesOnGIERefreshGrid(t *testing.T) {
	cfg := small()
	w := &world{cfg: cfg, addrs: experiment.Addrs(2)}
	var err error
	if w.hasher, err = hasherFor(cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.build(experiment.Arm{Name: "gie", Policy: experiment.PolicyGIE}, 1); err != nil {
		t.Fatal(err)
	}
	defer w.close()
	req := func(i int) *pending {
		return &pending{req: workload.Request{Index: i, Text: fmt.Sprintf("prompt %d %s", i, strings.Repeat("tok ", 200))}}
	}
	w.now = 120 * time.Millisecond
	if _, err := w.pickGIE(req(0)); err != nil {
		t.Fatal(err)
	}
	if w.scr.last != 100*time.Millisecond || !w.scr.due || w.events.Len() != 1 || w.events[0].kind != evScrape || w.events[0].at != 150*time.Millisecond {
		t.Fatalf("after a pick at 120ms: last scrape %v, due %v, events %v; want the 100ms scrape and one due at 150ms", w.scr.last, w.scr.due, w.events)
	}
	// Load engine 0: one step's gauges show its requests.
	e := w.engines[0]
	for i := range 4 {
		if err := e.Add(&sim.Request{ID: fmt.Sprintf("load-%d", i), Tokens: make([]uint32, 2000), MaxTokens: 8}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := e.Start(w.now); !ok {
		t.Fatal("engine 0 did not start a step")
	}
	e.Finish()
	if m := e.Metrics(); m.Running+m.Waiting == 0 {
		t.Fatalf("engine 0 shows no load after a step: %+v", m)
	}
	w.now = 130 * time.Millisecond
	if _, err := w.pickGIE(req(1)); err != nil {
		t.Fatal(err)
	}
	if s := w.gie.seen[w.addrs[0]]; s.Running+s.Waiting != 0 || w.scr.last != 100*time.Millisecond {
		t.Fatalf("at 130ms GIE sees engine 0 as %+v (scraped %v); want the idle 100ms scrape", s, w.scr.last)
	}
	w.now = 150 * time.Millisecond
	w.onScrape(1)
	if s := w.gie.seen[w.addrs[0]]; s.Running+s.Waiting == 0 || s.KVCacheUsage <= 0 || s.CacheBlockSize != cfg.Engine.BlockSize || s.CacheNumBlocks != cfg.Engine.Blocks() {
		t.Fatalf("the 150ms scrape shows engine 0 as %+v", s)
	}
	w.now = 160 * time.Millisecond
	for i := 2; i < 6; i++ {
		got, err := w.pickGIE(req(i))
		if err != nil {
			t.Fatal(err)
		}
		if got != w.addrs[1] {
			t.Fatalf("unheld prompt %d went to %s, the engine the scrape shows loaded", i, got)
		}
	}
	for i := range 6 {
		if err := w.gieDone(fmt.Sprintf("req-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGIELoRAConfig: the gie+residency arm's profile is GIE's default plus the
// lora-affinity-scorer.
func TestGIELoRAConfig(t *testing.T) {
	p, err := gie.New([]string{"10.0.0.1:8000", "10.0.0.2:8000"}, gie.Config{PickerConfig: gieLoRAConfig})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	weights := map[string]float64{}
	for _, pl := range p.Pipeline().Profile {
		weights[pl.Type] = pl.Weight
	}
	for typ, w := range map[string]float64{"queue-scorer": 2, "kv-cache-utilization-scorer": 2, "prefix-cache-scorer": 3, "lora-affinity-scorer": 2} {
		if weights[typ] != w {
			t.Errorf("%s weight %v, want %v (pipeline %v)", typ, weights[typ], w, p.Pipeline())
		}
	}
}
