package vtime

import (
	"context"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"

	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/picker"
)

func cellSeeds(n int) []CellSeed {
	var out []CellSeed
	for s := range n {
		sd := CellSeed{Seed: uint64(s + 1)}
		for i := range 40 {
			sd.PrefixIDs = append(sd.PrefixIDs, (i*7+s)%20)
			sd.SendAt = append(sd.SendAt, time.Duration(i)*70*time.Millisecond)
		}
		out = append(out, sd)
	}
	return out
}

func TestRunCellFollowsTheProtocol(t *testing.T) {
	cfg := CellConfig{Sweep: experiment.DefaultConfig(), Arm: experiment.Arm{Name: "kvaware", Policy: "kvaware"}, Seeds: cellSeeds(3),
		SampleInterval: time.Second, Warmup: true}
	res, err := RunCell(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 3 || len(res.SeedStart) != 3 {
		t.Fatalf("%d runs, %d seed starts: want 3 each", len(res.Runs), len(res.SeedStart))
	}
	// Warm-up: 2 passes over the 128 prefixes, split between the engines.
	if got := res.Start.Requests[0] + res.Start.Requests[1]; got != 256 {
		t.Fatalf("%d warm-up requests, want 256", got)
	}
	if res.Start.CPUBytes[0] == 0 || res.Start.CPUBytes[1] == 0 {
		t.Fatalf("CPU tiers %v after the warm-up: want both filled", res.Start.CPUBytes)
	}
	for k := 1; k < 3; k++ {
		prev := res.Runs[k-1]
		last := 0.0
		for _, r := range prev.Rows {
			last = max(last, r.SendAt+r.E2E)
		}
		// The driver waits SeedGap after the last completion it saw.
		gap := res.SeedStart[k].Seconds() - (res.SeedStart[k-1].Seconds() + last)
		want := cfg.Sweep.SeedGap.Seconds()
		if gap < want-1e-9 || gap > want+1e-6 {
			t.Fatalf("seed %d starts %.6f s after seed %d's last completion, want %.6f", k+1, gap, k, want)
		}
	}
	for i := 1; i < len(res.Samples); i++ {
		if d := res.Samples[i].At - res.Samples[i-1].At; d != cfg.SampleInterval {
			t.Fatalf("samples %d and %d are %v apart, want %v", i-1, i, d, cfg.SampleInterval)
		}
	}
	if res.Samples[0].At != 0 {
		t.Fatalf("first sample at %v, want the first seed's first send", res.Samples[0].At)
	}
	if res.End.Requests[0]+res.End.Requests[1] != 256+120 {
		t.Fatalf("routed %v requests in all, want 376", res.End.Requests)
	}
	again, err := RunCell(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if again.End.Hits[0] != res.End.Hits[0] || again.Runs[2].Rows[39].E2E != res.Runs[2].Rows[39].E2E {
		t.Fatal("the same cell twice gave different results")
	}
}

func TestCellConfigValidate(t *testing.T) {
	good := CellConfig{Sweep: experiment.DefaultConfig(), Arm: experiment.Arm{Name: "kvaware", Policy: "kvaware"}, Seeds: cellSeeds(1), SampleInterval: time.Second}
	tests := []struct {
		name string
		edit func(*CellConfig)
		want string
	}{
		{"no seeds", func(c *CellConfig) { c.Seeds = nil }, "no seeds"},
		{"negative gap", func(c *CellConfig) { c.Sweep.SeedGap = -1 }, "seed gap"},
		{"no sample interval", func(c *CellConfig) { c.SampleInterval = 0 }, "sample interval"},
		{"lengths differ", func(c *CellConfig) {
			c.Seeds = []CellSeed{{Seed: 1, PrefixIDs: []int{1, 2}, SendAt: []time.Duration{0}}}
		}, "same number"},
		{"unknown policy", func(c *CellConfig) { c.Arm.Policy = "fastest" }, "fastest"},
		{"explicit requests empty", func(c *CellConfig) {
			c.Seeds = []CellSeed{{Seed: 1, Requests: []workload.Request{}}}
		}, "no requests"},
		{"explicit requests out of send order", func(c *CellConfig) {
			c.Seeds = []CellSeed{{Seed: 1, Requests: []workload.Request{{SendAt: time.Second}, {SendAt: 0}}}}
		}, "must not decrease"},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// A seed given as explicit requests runs exactly as the same requests given
// as prefix ids and send offsets: the replay is only a way to build them.
func TestRunCellWithExplicitRequestsEqualsTheReplay(t *testing.T) {
	cfg := CellConfig{Sweep: experiment.DefaultConfig(), Arm: experiment.Arm{Name: "loadaware-b1", Policy: "loadaware", Beta: 1}, Seeds: cellSeeds(2),
		SampleInterval: time.Second, Warmup: true}
	want, err := RunCell(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := workload.NewPool(cfg.Sweep.Workload)
	if err != nil {
		t.Fatal(err)
	}
	explicit := cfg
	explicit.Seeds = nil
	for _, sd := range cfg.Seeds {
		reqs, err := workload.Replay(cfg.Sweep.Workload, pool, sd.Seed, sd.PrefixIDs, sd.SendAt)
		if err != nil {
			t.Fatal(err)
		}
		explicit.Seeds = append(explicit.Seeds, CellSeed{Seed: sd.Seed, Requests: reqs})
	}
	got, err := RunCell(context.Background(), explicit)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(nanFreeCell(got), nanFreeCell(want)) {
		t.Fatal("explicit requests gave a different cell than their replay")
	}
	// Generated when the cell reaches them, the same requests give the same cell.
	lazy := explicit
	lazy.Seeds = nil
	for _, sd := range explicit.Seeds {
		reqs := sd.Requests
		lazy.Seeds = append(lazy.Seeds, CellSeed{Seed: sd.Seed, Generate: func() ([]workload.Request, error) { return reqs, nil }})
	}
	if got, err := RunCell(context.Background(), lazy); err != nil || !reflect.DeepEqual(nanFreeCell(got), nanFreeCell(want)) {
		t.Fatalf("generated requests gave a different cell than their replay (err %v)", err)
	}
	lazy.Seeds[1].Generate = func() ([]workload.Request, error) { return []workload.Request{{SendAt: time.Second}, {}}, nil }
	if _, err := RunCell(context.Background(), lazy); err == nil || !strings.Contains(err.Error(), "must not decrease") {
		t.Fatalf("generated requests out of send order: err = %v", err)
	}
	// And a different request list gives a different cell: the test can fail.
	explicit.Seeds[1].Requests = explicit.Seeds[1].Requests[:20]
	other, err := RunCell(context.Background(), explicit)
	if err != nil {
		t.Fatal(err)
	}
	if len(other.Runs[1].Rows) != 20 {
		t.Fatalf("seed 2 ran %d requests, want the 20 given", len(other.Runs[1].Rows))
	}
}

// nanFreeCell replaces the NaN latencies of failed rows, so DeepEqual can
// compare cells.
func nanFreeCell(c CellResult) CellResult {
	for i := range c.Runs {
		for j := range c.Runs[i].Rows {
			r := &c.Runs[i].Rows[j]
			if math.IsNaN(r.TTFT) {
				r.TTFT, r.E2E = -1, -1
			}
		}
	}
	return c
}

// The engines' LMCache tiers published as vLLM KV events carry the same
// contiguous prefixes (a prompt's partial last chunk aside, which no other
// prompt shares in this workload), so a sweep routed on vLLM events makes the
// same decisions and gives the same results as one routed on LMCache events,
// and "both" (the longer per endpoint) as well.
func TestVLLMEventsSourceDecidesAsLMCache(t *testing.T) {
	run := func(source string) experiment.Results {
		cfg := small()
		cfg.CacheSource = source
		res, err := RunSweep(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Config = experiment.Config{}
		return nanFree(res)
	}
	lm := run(picker.SourceLMCache)
	for _, source := range []string{picker.SourceVLLMEvents, picker.SourceBoth} {
		got := run(source)
		for i := range lm.Runs {
			for j, row := range lm.Runs[i].Rows {
				if g := got.Runs[i].Rows[j]; g.Engine != row.Engine || g.TTFT != row.TTFT {
					t.Fatalf("%s: %s seed %d request %d went to %s (TTFT %v); on LMCache events to %s (%v)",
						source, lm.Runs[i].Arm.Name, lm.Runs[i].Seed, j, g.Engine, g.TTFT, row.Engine, row.TTFT)
				}
			}
		}
	}
	cfg := small()
	cfg.CacheSource = "gossip"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "gossip") {
		t.Fatalf("unknown cache source: %v", err)
	}
}
