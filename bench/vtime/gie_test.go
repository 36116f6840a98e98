package vtime

import (
	"context"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/experiment"
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
