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
	"github.com/loadaware/loadaware-epp/picker"
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

// dpConfig is one server of 2 data-parallel ranks, cold, its caches learnt from vLLM's
// KV events (which name the rank).
func dpConfig() experiment.Config {
	cfg := experiment.DefaultConfig()
	cfg.Engines, cfg.Slowdowns, cfg.DPRanks = 1, nil, 2
	cfg.CacheSource = picker.SourceVLLMEvents
	cfg.Protocol, cfg.Warmup = experiment.ProtocolPerSeed, 0
	cfg.Arms = []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "kvaware+ranks", Policy: "kvaware", Ranks: true}}
	cfg.Seeds = []uint64{1}
	return cfg
}

// Prompts A and B arrive together (A takes rank 0, B rank 1, whoever balances them);
// B again, alone, later: an arm that tells the ranks apart pins it to rank 1, which
// holds it in its GPU; vLLM's balancer sends it to idle rank 0, which does not.
func TestRanksArmPinsToTheHolderRank(t *testing.T) {
	prompt := func(tag uint32) []uint32 {
		out := make([]uint32, 1024)
		for i := range out {
			out[i] = tag*10000 + uint32(i)
		}
		return out
	}
	reqs := []workload.Request{
		{Index: 0, Tokens: prompt(1), MaxTokens: 4},
		{Index: 1, Tokens: prompt(2), MaxTokens: 4},
		{Index: 2, Tokens: prompt(2), MaxTokens: 4, SendAt: 5 * time.Second},
	}
	cfg := dpConfig()
	for _, tc := range []struct {
		arm    experiment.Arm
		cached bool // the third request finds B in the GPU cache
	}{{cfg.Arms[0], false}, {cfg.Arms[1], true}} {
		t.Run(tc.arm.Name, func(t *testing.T) {
			run, err := RunRequests(context.Background(), cfg, tc.arm, 1, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range run.Rows {
				if row.Status != "ok" {
					t.Fatalf("row %d: %q", i, row.Status)
				}
			}
			if got := run.Rows[2].CachedTokens > 0; got != tc.cached {
				t.Errorf("B's repeat found %d tokens in the GPU cache; want a hit: %v", run.Rows[2].CachedTokens, tc.cached)
			}
		})
	}
}

func TestRanksArmNeedsRanksAndKVEvents(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*experiment.Config)
	}{
		{"no ranks", func(c *experiment.Config) { c.DPRanks = 0 }},
		{"LMCache events", func(c *experiment.Config) { c.CacheSource = picker.SourceLMCache }},
	} {
		cfg := dpConfig()
		tc.edit(&cfg)
		if _, err := RunOne(context.Background(), cfg, cfg.Arms[1], 1); err == nil || !strings.Contains(err.Error(), "data-parallel") {
			t.Errorf("%s: err = %v, want one naming the data-parallel ranks", tc.name, err)
		}
	}
	cfg := dpConfig()
	if _, err := WarmUp(context.Background(), cfg, cfg.Arms[0], 1); err == nil {
		t.Error("WarmUp of data-parallel engines (for the live mode) succeeded")
	}
}

// With Config.Pickers replicas the requests are routed by each in turn, and each sees
// what the others have in flight as its endpoints' remote load; a count outside
// 0..MaxPickers is refused.
func TestPickerReplicasShareEndpointLoads(t *testing.T) {
	cfg := dpConfig()
	cfg.Engines, cfg.Slowdowns = 2, nil
	cfg.Pickers = 2
	w := &world{cfg: cfg, addrs: experiment.Addrs(2)}
	var err error
	if w.hasher, err = hasherFor(cfg); err != nil {
		t.Fatal(err)
	}
	if err := w.build(cfg.Arms[1], 0); err != nil {
		t.Fatal(err)
	}
	if len(w.replicas) != 2 || w.replicas[0].picker != w.picker || w.replicas[1].fleet == w.fleet {
		t.Fatalf("replicas %+v: want 2, the first the world's picker, each on its own fleet", w.replicas)
	}
	b, err := w.replicas[1].fleet.Book(w.addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	w.shareLoads(w.replicas[0].fleet)
	for i, want := range []int{0, 1} {
		if got := w.replicas[0].fleet.Loads(w.addrs[i : i+1])[0].InFlight(); got != want {
			t.Errorf("replica 0 sees %d in flight on %s, want %d (replica 1's booking)", got, w.addrs[i], want)
		}
	}
	if got := w.replicas[1].fleet.Loads(w.addrs[1:2])[0].InFlight(); got != 1 {
		t.Errorf("replica 1 sees %d in flight on its own booking's endpoint, want 1", got)
	}
	for _, n := range []int{-1, experiment.MaxPickers + 1} {
		bad := dpConfig()
		bad.Pickers = n
		if _, err := RunOne(context.Background(), bad, bad.Arms[0], 1); err == nil || !strings.Contains(err.Error(), "picker replicas") {
			t.Errorf("Pickers %d: err = %v, want one naming the picker replicas", n, err)
		}
	}
}
