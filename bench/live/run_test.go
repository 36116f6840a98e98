package live

import (
	"context"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/vtime"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// fastSweep is the calibrated sweep with engines 20 times faster (engine 1 1.35 times
// slower than engine 0) and a 5 ms ingress, so live tests take seconds.
func fastSweep() experiment.Config {
	cfg := experiment.DefaultConfig()
	cfg.Slowdowns = []float64{1.0 / 20, 1.35 / 20}
	cfg.HostDelays = nil
	cfg.Engine.IngressLatency = 5 * time.Millisecond
	// The live fleet sits behind the real gateway and picker: its twin in
	// virtual time behind the Envoy router model, each seed on its own fleet.
	cfg.Router = experiment.EnvoyRouter()
	cfg.Protocol = experiment.ProtocolPerSeed
	return cfg
}

// sequentialSeed is the cold fleet and the seed the decision-equality tests send: 40
// requests over 8 prefixes (so prompts repeat), 2 output tokens, 1/3 s apart.
func sequentialSeed(t *testing.T) (experiment.Config, uint64, []workload.Request) {
	t.Helper()
	cfg := fastSweep()
	cfg.Warmup = 0
	cfg.Workload.Requests = 40
	cfg.Workload.Prefixes = 8
	cfg.Workload.MaxTokens = 2
	const seed = 3
	reqs, err := workload.Generate(cfg.Workload, nil, seed)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		reqs[i].SendAt = time.Duration(i) * time.Second / 3 // 3 req/s
	}
	return cfg, seed, reqs
}

func engineIndex(run experiment.Run) map[string]int {
	out := map[string]int{}
	for i, e := range run.Engines {
		out[e.Addr] = i
	}
	return out
}

// choice is one request's engine, by index, in virtual time and live (-1: not an engine
// of the run).
type choice struct{ v, l int }

func (c choice) same() bool { return c.v >= 0 && c.v == c.l }

// choices lists each request's choice; it fails the test at a live request that failed.
func choices(t *testing.T, vt experiment.Run, lv Result) []choice {
	t.Helper()
	vIdx, lIdx := engineIndex(vt), engineIndex(lv.Run)
	out := make([]choice, len(lv.Run.Rows))
	for i, l := range lv.Run.Rows {
		if l.Status != "ok" {
			t.Fatalf("live request %d failed: %s", i, l.Error)
		}
		out[i] = choice{-1, -1}
		if e, ok := vIdx[vt.Rows[i].Engine]; ok {
			out[i].v = e
		}
		if e, ok := lIdx[l.Engine]; ok {
			out[i].l = e
		}
	}
	return out
}

var reasonRE = regexp.MustCompile(` reason=(\S+)`)

// TestLiveAndVirtualTimeMakeTheSameDecisions sends the same 40 requests (8 prefixes, so
// prompts repeat) through both modes at a rate where no request overlaps the next: every
// decision then sees no load and the effect of every earlier request on the cache, and the
// two modes must choose the same engine for every request, under kvaware and loadaware.
func TestLiveAndVirtualTimeMakeTheSameDecisions(t *testing.T) {
	cfg, seed, reqs := sequentialSeed(t)
	for _, arm := range []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "loadaware-b1", Policy: "loadaware", Beta: 1}} {
		t.Run(arm.Name, func(t *testing.T) {
			vt, err := vtime.RunRequests(context.Background(), cfg, arm, seed, reqs)
			if err != nil {
				t.Fatal(err)
			}
			for i, r := range vt.Rows[:len(vt.Rows)-1] {
				if r.SendAt+r.E2E >= vt.Rows[i+1].SendAt {
					t.Fatalf("precondition: in virtual time request %d ends at %.3fs, after request %d is sent: lower the rate", i, r.SendAt+r.E2E, i+1)
				}
			}
			lv, err := Run(context.Background(), cfg, arm, seed, Options{WarmUp: vtime.WarmUp, Requests: reqs, Sequential: true, Explain: func(int) bool { return true }})
			if err != nil {
				t.Fatal(err)
			}
			reasons := map[string]int{}
			for i, c := range choices(t, vt, lv) {
				if !c.same() {
					t.Errorf("request %d (prefix %d): virtual time chose engine %d (%s), live engine %d (%s; %s)", i, reqs[i].PrefixID, c.v, vt.Rows[i].Engine, c.l, lv.Run.Rows[i].Engine, lv.Decisions[i])
				}
				if m := reasonRE.FindStringSubmatch(lv.Decisions[i]); m != nil {
					reasons[m[1]]++
				}
			}
			if reasons["qps-fallback"] == 0 || reasons["cache-holder"]+reasons["cache-affinity"] == 0 {
				t.Errorf("decision reasons %v: the run must exercise both the cache route and the fallback", reasons)
			}
			if lv.Messages == 0 || lv.Messages != lv.Received {
				t.Errorf("engines pushed %d LMCache messages, the controller received %d", lv.Messages, lv.Received)
			}
		})
	}
}

// TestRunOpenLoopFromAWarmFleet sends a short seed open-loop after a virtual-time warm-up
// and checks the run is complete and readable by the analysis.
func TestRunOpenLoopFromAWarmFleet(t *testing.T) {
	cfg := fastSweep()
	cfg.Warmup = 300
	cfg.Workload.Requests = 60
	cfg.Workload.Rate = 40
	cfg.Workload.MaxTokens = 8
	arm := experiment.Arm{Name: "loadaware-b1", Policy: "loadaware", Beta: 1}
	var progress []int
	res, err := Run(context.Background(), cfg, arm, 1, Options{
		WarmUp: vtime.WarmUp,
		Progress: func(done, total int) {
			if total != 60 {
				t.Errorf("progress total %d, want 60", total)
			}
			progress = append(progress, done)
		},
		Explain: func(i int) bool { return i == 30 },
	})
	if err != nil {
		t.Fatal(err)
	}
	run := res.Run
	if len(run.Rows) != 60 || len(progress) != 60 || progress[59] != 60 {
		t.Fatalf("%d rows, progress %v", len(run.Rows), progress)
	}
	served := 0
	for _, r := range run.Rows {
		if r.Status != "ok" || r.CompletionTokens != 8 || len(r.ITLs) != 7 || !(r.TTFT > 0) || r.E2E < r.TTFT {
			t.Fatalf("row %+v", r)
		}
	}
	for i, e := range run.Engines {
		if !strings.HasPrefix(e.Addr, experiment.Addrs(2)[i][:len("127.0.1.1")]+":") {
			t.Errorf("engine %d listens on %s, want 127.0.1.%d", i, e.Addr, i+1)
		}
		served += e.Requests
	}
	if served != 60 {
		t.Errorf("engines served %d requests, want 60", served)
	}
	if res.WarmEvents == 0 || res.Messages == 0 || res.Messages != res.Received {
		t.Errorf("warm-up events %d; messages pushed %d, received %d", res.WarmEvents, res.Messages, res.Received)
	}
	if res.InFlightAfter != 0 {
		t.Errorf("the picker still counts %v requests in flight", res.InFlightAfter)
	}
	if !strings.Contains(res.Decisions[30], "policy=loadaware beta=1 winner=127.0.1.") || len(res.Decisions) != 1 {
		t.Errorf("decisions %v, want request 30's explanation", res.Decisions)
	}
	// Samples every 250 ms over the send window (~1.5 s). A scrape takes the engines'
	// /metrics round trips, so a loaded machine fits fewer (beside CPU burners under -race,
	// 4 over a 2.82 s window: one per 700 ms): at least two, so sampling went on past the
	// start, and never more than the window holds.
	if want := run.Window/run.Interval.Seconds() + 1; len(run.Running) < 2 || float64(len(run.Running)) > want+2 {
		t.Errorf("%d samples over a %.2fs window, want about %.0f", len(run.Running), run.Window, want)
	}
	m := analysis.SeedMetricsOf(run)
	if m.Errors != 0 || !(m.HitRate > 0.5) || math.IsNaN(m.TTFT.P95) || math.IsNaN(m.ReqPerSec) {
		t.Errorf("seed metrics: errors %d, hit rate %v, TTFT p95 %v, req/s %v", m.Errors, m.HitRate, m.TTFT.P95, m.ReqPerSec)
	}
}

func TestRunRefusesAnUnusableConfig(t *testing.T) {
	cfg := fastSweep()
	cfg.Engines = 0
	if _, err := Run(context.Background(), cfg, experiment.Arm{Name: "kvaware", Policy: "kvaware"}, 1, Options{}); err == nil || !strings.Contains(err.Error(), "engines") {
		t.Errorf("error %v, want one about the engine count", err)
	}
	cfg = fastSweep()
	if _, err := Run(context.Background(), cfg, experiment.Arm{Name: "kvaware", Policy: "kvaware"}, 1, Options{WarmUp: vtime.WarmUp, Requests: []workload.Request{}}); err == nil {
		t.Error("no requests: no error")
	}
	if _, err := Run(context.Background(), cfg, experiment.Arm{Name: "kvaware", Policy: "kvaware"}, 1, Options{}); err == nil || !strings.Contains(err.Error(), "Options.WarmUp is nil") {
		t.Errorf("error %v, want one about the missing warm-up", err)
	}
}

func TestRunRefusesTheGIEArm(t *testing.T) {
	arm := experiment.Arm{Name: "gie", Policy: experiment.PolicyGIE}
	_, err := Run(context.Background(), fastSweep(), arm, 1, Options{WarmUp: vtime.WarmUp})
	if err == nil || !strings.Contains(err.Error(), "only in virtual time") {
		t.Fatalf("error %v, want the gie arm refused as virtual-time only", err)
	}
}
