package vtime

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
	"github.com/loadaware/loadaware-epp/lmcache"
)

func TestRunRequestsWithTheSeedsWorkloadIsRunOne(t *testing.T) {
	cfg := small()
	arm := cfg.Arms[1]
	want, err := RunOne(context.Background(), cfg, arm, 2)
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := workload.Generate(cfg.Workload, nil, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err := RunRequests(context.Background(), cfg, arm, 2, reqs)
	if err != nil {
		t.Fatal(err)
	}
	one := func(r experiment.Run) experiment.Results {
		return nanFree(experiment.Results{Runs: []experiment.Run{r}})
	}
	if !reflect.DeepEqual(one(got), one(want)) {
		t.Fatal("RunRequests with the seed's own requests differs from RunOne")
	}
	if _, err := RunRequests(context.Background(), cfg, arm, 2, nil); err == nil {
		t.Error("RunRequests without requests did not fail")
	}
}

func TestWarmUpLeavesTheFleetTheMeasuredSeedStartsFrom(t *testing.T) {
	tests := []struct {
		name     string
		protocol string
		warmup   int
	}{
		{"per-seed, no warm-up: new idle engines at time zero", experiment.ProtocolPerSeed, 0},
		{"per-seed warm-up fills the caches and reports every chunk", experiment.ProtocolPerSeed, 150},
		{"published warm-up and the seeds before this one", experiment.ProtocolPublished, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small()
			cfg.Protocol, cfg.Warmup = tc.protocol, tc.warmup
			w, err := WarmUp(context.Background(), cfg, cfg.Arms[0], 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(w.Engines) != cfg.Engines {
				t.Fatalf("%d engines, want %d", len(w.Engines), cfg.Engines)
			}
			for i, e := range w.Engines {
				if _, busy := e.Busy(); busy || e.Metrics().Running+e.Metrics().Waiting != 0 {
					t.Errorf("engine %d is not idle after the warm-up", i)
				}
				if got, want := e.Config().Slowdown, cfg.EngineConfig(i).Slowdown; got != want {
					t.Errorf("engine %d slowdown %v, want %v", i, got, want)
				}
			}
			if tc.protocol == experiment.ProtocolPerSeed && tc.warmup == 0 {
				if w.Now != 0 || len(w.Events) != 0 {
					t.Fatalf("no warm-up gave time %v and %d events, want 0 and 0", w.Now, len(w.Events))
				}
				return
			}
			if w.Now < time.Second || len(w.Events) == 0 {
				t.Fatalf("warm-up ended at %v with %d events", w.Now, len(w.Events))
			}
			// Replaying the events into a new index reproduces every engine's CPU tier.
			ix, err := lmcache.NewIndex(lmcache.IndexConfig{Keys: lmcache.KeyConfig{HashSeed: cfg.HashSeed}})
			if err != nil {
				t.Fatal(err)
			}
			if err := register(ix, experiment.Addrs(cfg.Engines), time.Unix(0, 0)); err != nil {
				t.Fatal(err)
			}
			held := map[string]int{}
			for _, m := range w.Events {
				switch m := m.(type) {
				case lmcache.KVAdmitMsg:
					held[m.InstanceID]++
				case lmcache.KVEvictMsg:
					held[m.InstanceID]--
				default:
					t.Fatalf("unexpected %s in the warm-up events", m.Tag())
				}
				if err := ix.Apply(m, time.Unix(0, 0)); err != nil {
					t.Fatal(err)
				}
			}
			for _, in := range ix.Instances() {
				if in.Keys != held[in.ID] || in.Keys == 0 {
					t.Errorf("instance %s holds %d keys after the replay, want admits - evicts = %d (> 0)", in.ID, in.Keys, held[in.ID])
				}
			}
			again, err := WarmUp(context.Background(), cfg, cfg.Arms[0], 1)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(again.Events, w.Events) || again.Now != w.Now {
				t.Error("two warm-ups of the same arm and seed differ")
			}
		})
	}
}

// The published warm-up sends each batch of four prompts at one instant. The
// published router reads the same request statistics for all four (its
// stats lag), so a batch of unheld prompts lands on one engine and the
// batches alternate; this picker books synchronously, so behind Envoy the
// prompts alternate one by one.
func TestPublishedWarmupPlacement(t *testing.T) {
	tests := []struct {
		name   string
		router experiment.Router
		engine func(prefix int) string
	}{
		{"published router: batches of four alternate", experiment.PublishedRouter(), func(p int) string { return experiment.InstanceID((p / 4) % 2) }},
		{"Envoy and this picker: prompts alternate", experiment.EnvoyRouter(), func(p int) string { return experiment.InstanceID(p % 2) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small()
			cfg.Router = tc.router
			cfg.Seeds = []uint64{1}
			w, err := WarmUp(context.Background(), cfg, cfg.Arms[0], 1)
			if err != nil {
				t.Fatal(err)
			}
			h, err := hasherFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			pool, err := workload.NewPool(cfg.Workload)
			if err != nil {
				t.Fatal(err)
			}
			holder := map[int64]string{}
			for _, m := range w.Events {
				if a, ok := m.(lmcache.KVAdmitMsg); ok {
					if _, seen := holder[a.Key]; !seen {
						holder[a.Key] = a.InstanceID
					}
				}
			}
			for p := range pool.Len() {
				key := h.ChunkKeys(pool.Tokens(p))[0]
				if got, want := holder[key], tc.engine(p); got != want {
					t.Fatalf("prefix %d first stored on %q, want %q", p, got, want)
				}
			}
		})
	}
}

// Under the published protocol a seed starts from the fleet the seeds before
// it left: RunOne of every seed equals that seed's run in the sweep (its
// requests and its engine samples, which the seeds after it must not
// overwrite), and a later seed differs from the same seed on a fleet that
// only had the warm-up.
func TestPublishedSeedsRunBackToBack(t *testing.T) {
	cfg := small()
	cfg.Protocol = experiment.ProtocolPublished
	cfg.Seeds = []uint64{1, 2, 3}
	res, err := RunSweep(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	wrap := func(r experiment.Run) experiment.Results {
		return nanFree(experiment.Results{Runs: []experiment.Run{r}})
	}
	var one experiment.Run
	for i, seed := range cfg.Seeds {
		if one, err = RunOne(context.Background(), cfg, cfg.Arms[0], seed); err != nil {
			t.Fatal(err)
		}
		got := res.Runs[i]
		if len(got.Running) == 0 {
			t.Fatalf("seed %d of the published sweep has no engine samples", seed)
		}
		if !reflect.DeepEqual(got.Running, one.Running) {
			k := 0
			for k < min(len(got.Running), len(one.Running)) && reflect.DeepEqual(got.Running[k], one.Running[k]) {
				k++
			}
			t.Errorf("seed %d of the published sweep: engine samples (%d) differ from RunOne's (%d) from sample %d on",
				seed, len(got.Running), len(one.Running), k)
		}
		if !reflect.DeepEqual(wrap(one), wrap(got)) {
			t.Errorf("RunOne of seed %d differs from seed %d of the published sweep", seed, seed)
		}
	}
	cfg.Seeds = []uint64{1, 2}
	if one, err = RunOne(context.Background(), cfg, cfg.Arms[0], 2); err != nil {
		t.Fatal(err)
	}
	alone := cfg
	alone.Seeds = []uint64{2}
	fresh, err := RunOne(context.Background(), alone, cfg.Arms[0], 2)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(wrap(fresh), wrap(one)) {
		t.Fatal("seed 2 after seed 1 equals seed 2 on a fleet without seed 1's history")
	}
}

// Four prompts of one prefix arrive at the same instant, its holder idle. The
// published router counts each request only after its lookup returns, so
// loadaware sends all four to the holder; this picker books at once, so the
// third already sees the holder loaded and goes to the other engine (which
// then stores the prefix too).
func TestStaleLoadsKeepSimultaneousRequestsOnTheHolder(t *testing.T) {
	onHolder := func(r experiment.Router) int {
		cfg := small()
		cfg.Router, cfg.Protocol, cfg.Warmup = r, experiment.ProtocolPerSeed, 0
		cfg.Workload.Requests = 5
		reqs, err := workload.Generate(cfg.Workload, nil, 1)
		if err != nil {
			t.Fatal(err)
		}
		for i := range reqs {
			reqs[i].Tokens = append(append([]uint32(nil), reqs[0].Tokens[:1544]...), reqs[i].Tokens[1544:]...)
			reqs[i].SendAt = 5 * time.Second // after the first has finished and stored the prefix
		}
		reqs[0].SendAt = 0
		run, err := RunRequests(context.Background(), cfg, experiment.Arm{Name: "loadaware-b0.5", Policy: "loadaware", Beta: 0.5}, 1, reqs)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, row := range run.Rows[1:] {
			if row.Engine == run.Rows[0].Engine {
				n++
			}
		}
		return n
	}
	if got := onHolder(experiment.PublishedRouter()); got != 4 {
		t.Errorf("published router: %d of 4 simultaneous requests on the holder, want 4", got)
	}
	// The third sees the holder at 2 in flight and the other at 0 (relative
	// loads +1 and -1: 0.973 - 0.5 < 0 + 0.5); the fourth sees 2 vs 1 and
	// returns to the holder.
	if got := onHolder(experiment.EnvoyRouter()); got != 3 {
		t.Errorf("synchronous bookings: %d of 4 simultaneous requests on the holder, want 3", got)
	}
}
