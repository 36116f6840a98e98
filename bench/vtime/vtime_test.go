package vtime

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"

	"github.com/loadaware/loadaware-epp/bench/workload"
)

// small is a quick sweep: 2 arms x 2 seeds x 120 requests after a 120-request warm-up.
func small() experiment.Config {
	cfg := experiment.DefaultConfig()
	cfg.Arms = []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "loadaware-b1", Policy: "loadaware", Beta: 1}}
	cfg.Seeds = []uint64{1, 2}
	cfg.Workload.Requests = 120
	cfg.Warmup = 120
	return cfg
}

func TestRunSweepIsExactlyRepeatableWhateverTheWorkers(t *testing.T) {
	cfg := small()
	cfg.Workers = 1
	var calls []int
	a, err := RunSweep(context.Background(), cfg, func(done, total int) {
		if total != 4 {
			t.Errorf("total %d, want 4", total)
		}
		calls = append(calls, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(calls, []int{1, 2, 3, 4}) {
		t.Errorf("progress calls %v, want 1..4", calls)
	}
	cfg.Workers = 3
	b, err := RunSweep(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.Config.Workers, b.Config.Workers = 0, 0
	if !reflect.DeepEqual(nanFree(a), nanFree(b)) {
		t.Fatal("the same sweep with 1 and 3 workers gave different results")
	}
	if len(a.Runs) != 4 || a.Runs[0].Arm.Name != "kvaware" || a.Runs[1].Seed != 2 || a.Runs[2].Arm.Name != "loadaware-b1" {
		t.Fatalf("runs are not arm-major in config order: %v %v %v", a.Runs[0].Arm, a.Runs[1].Seed, a.Runs[2].Arm)
	}
}

// nanFree replaces NaNs (which never compare equal) so results can be compared.
func nanFree(r experiment.Results) experiment.Results {
	for i := range r.Runs {
		for j := range r.Runs[i].Rows {
			row := &r.Runs[i].Rows[j]
			if math.IsNaN(row.TTFT) {
				row.TTFT = -1
			}
			if math.IsNaN(row.E2E) {
				row.E2E = -1
			}
		}
	}
	return r
}

func TestRunOneMeasuresEveryRequest(t *testing.T) {
	cfg := small()
	run, err := RunOne(context.Background(), cfg, cfg.Arms[0], 1)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(cfg.Workload, nil, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(run.Rows) != 120 {
		t.Fatalf("%d rows, want 120", len(run.Rows))
	}
	served, hits := 0, 0
	for i, row := range run.Rows {
		if row.Status != "ok" || row.CompletionTokens != 64 || len(row.ITLs) != 63 {
			t.Fatalf("row %d: status %q, %d tokens, %d gaps", i, row.Status, row.CompletionTokens, len(row.ITLs))
		}
		if row.PrefixID != reqs[i].PrefixID || math.Abs(row.SendAt-reqs[i].SendAt.Seconds()) > 1e-9 {
			t.Fatalf("row %d does not match request %d", i, i)
		}
		if row.TTFT < cfg.Engine.IngressLatency.Seconds() || row.E2E < row.TTFT {
			t.Fatalf("row %d: TTFT %v e2e %v", i, row.TTFT, row.E2E)
		}
		if row.CachedTokens > 1500 {
			hits++
		}
	}
	for _, e := range run.Engines {
		served += e.Requests
	}
	if served != 120 {
		t.Fatalf("engines served %d requests, want 120", served)
	}
	// After a warm-up, the cache-aware policy finds most prefixes cached.
	if hits < 60 {
		t.Fatalf("only %d of 120 requests hit the GPU prefix cache", hits)
	}
	wantSamples := int(run.Window/cfg.SampleInterval.Seconds()) + 1
	if len(run.Running) != wantSamples || len(run.Running[0]) != 2 {
		t.Fatalf("%d samples of %d engines, want %d of 2", len(run.Running), len(run.Running[0]), wantSamples)
	}
	if run.Span < run.Window {
		t.Fatalf("span %v shorter than the send window %v", run.Span, run.Window)
	}
}

func TestBookingsAreReleasedAndEventsReachTheIndex(t *testing.T) {
	cfg := small()
	pool, err := workload.NewPool(cfg.Workload)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{cfg: cfg, addrs: experiment.Addrs(2)}
	w.hasher, err = hasherFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.build(cfg.Arms[1], 0); err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(cfg.Workload, pool, 5)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.play(context.Background(), reqs, true); err != nil {
		t.Fatal(err)
	}
	for _, l := range w.fleet.All() {
		if l.InFlight() != 0 {
			t.Fatalf("endpoint %s still has %d requests booked", l.Addr, l.InFlight())
		}
	}
	if w.index.Keys() == 0 {
		t.Fatal("the index received no chunk keys")
	}
	if len(w.owners) != 0 {
		t.Fatalf("%d requests never finished", len(w.owners))
	}
}

func TestRunSweepStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunSweep(ctx, small(), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*experiment.Config)
		want   string
	}{
		{"no engines", func(c *experiment.Config) { c.Engines = 0 }, "engines"},
		{"no arms", func(c *experiment.Config) { c.Arms = nil }, "no arms"},
		{"no seeds", func(c *experiment.Config) { c.Seeds = nil }, "no seeds"},
		{"negative warm-up", func(c *experiment.Config) { c.Warmup = -1 }, "warm-up"},
		{"zero sample interval", func(c *experiment.Config) { c.SampleInterval = 0 }, "sample interval"},
		{"repeated arm", func(c *experiment.Config) { c.Arms = append(c.Arms, c.Arms[0]) }, "repeated"},
		{"unknown policy", func(c *experiment.Config) { c.Arms = []experiment.Arm{{Name: "x", Policy: "fastest"}} }, "arm x"},
		{"bad workload", func(c *experiment.Config) { c.Workload.Rate = 0 }, "-rate"},
		{"bad engine", func(c *experiment.Config) { c.Engine.BlockSize = 0 }, "BlockSize"},
		{"bad hash seed", func(c *experiment.Config) { c.HashSeed = "not a number" }, "hash"},
	}
	if err := experiment.DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := experiment.DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tt.want)) {
				t.Fatalf("err = %v, want one mentioning %q", err, tt.want)
			}
			if _, err := RunSweep(context.Background(), c, nil); err == nil {
				t.Fatal("RunSweep accepted an invalid config")
			}
		})
	}
}

func TestDefaultsArePublishedSweep(t *testing.T) {
	c := experiment.DefaultConfig()
	if len(c.Arms) != 7 || len(c.Seeds) != 20 || c.Workload.Requests != 500 || c.Engines != 2 {
		t.Fatalf("default sweep %d arms x %d seeds x %d requests on %d engines, want 7 x 20 x 500 on 2",
			len(c.Arms), len(c.Seeds), c.Workload.Requests, c.Engines)
	}
	if got := experiment.Addrs(2); !reflect.DeepEqual(got, []string{"127.0.1.1:8000", "127.0.1.2:8000"}) {
		t.Fatalf("Addrs(2) = %v", got)
	}
	if c.SampleInterval != 250*time.Millisecond {
		t.Fatalf("sample interval %v", c.SampleInterval)
	}
}

func BenchmarkRunOneSeed(b *testing.B) {
	cfg := experiment.DefaultConfig()
	cfg.Warmup = 0
	for b.Loop() {
		if _, err := RunOne(context.Background(), cfg, cfg.Arms[0], 1); err != nil {
			b.Fatal(err)
		}
	}
}
