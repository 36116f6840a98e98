package tournament

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/internal/errcheck"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/scoring"
)

func TestDefaultArmsFollowScoringNames(t *testing.T) {
	arms := DefaultArms()
	names := map[string]bool{}
	policies := map[string]bool{}
	for _, a := range arms {
		if names[a.Name] {
			t.Fatalf("arm %s listed twice", a.Name)
		}
		names[a.Name], policies[a.Policy] = true, true
	}
	for _, p := range scoring.Names {
		if policies[p] == (p == "session") {
			t.Errorf("policy %s: in the arms = %v, want %v", p, policies[p], p != "session")
		}
	}
	for _, want := range []string{"loadaware-b0", "loadaware-b0.5", "loadaware-b1", "loadaware-b2", "kvaware", "roundrobin", "gie", "llmd-sticky"} {
		if !names[want] {
			t.Errorf("no arm %s in %v", want, names)
		}
	}
	if got, want := len(arms), len(scoring.Names)-1+len(DefaultBetas)-1+1; got != want {
		t.Errorf("%d arms, want %d (every policy but session, loadaware once per beta, gie)", got, want)
	}
	cfg := experiment.DefaultConfig()
	cfg.Arms = arms
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the default arms do not validate: %v", err)
	}
}

func TestSelectProfiles(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    []string
		wantErr string
	}{
		{"none selects every profile", nil, ProfileNames(), ""},
		{"a subset keeps the order given", []string{"novel", "published"}, []string{"novel", "published"}, ""},
		{"an unknown name lists the known ones", []string{"huge"}, nil, `unknown profile "huge": use published, rate20`},
		{"a repeated name is refused", []string{"novel", "novel"}, nil, "named twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SelectProfiles(tt.in)
			if errcheck.Done(t, err, tt.wantErr) {
				return
			}
			var names []string
			for _, p := range got {
				names = append(names, p.Name)
			}
			if !slices.Equal(names, tt.want) {
				t.Fatalf("got %v, want %v", names, tt.want)
			}
		})
	}
}

func TestProfilesAreValidAndBehindEnvoy(t *testing.T) {
	want := []string{"published", "rate20", "rate24", "burst", "fleet4", "fleet8", "smallcache", "novel", "chat", "long",
		"b2b-saas-high-cache", "b2b-saas-low-cache", "llmd-precise-doe-60x8k", "aibrix-prefix-repetition", "dynamo-prefix-ratio-0.5", "prodstack-multi-round-qa", "inference-perf-reasoning"}
	if got := ProfileNames(); !slices.Equal(got, want) {
		t.Fatalf("profiles %v, want %v", got, want)
	}
	for _, p := range Profiles() {
		cfg := Config{Profiles: []Profile{p}, Arms: DefaultArms(), Seeds: []uint64{1}, SampleInterval: DefaultSampleInterval}
		if err := cfg.Validate(); err != nil {
			t.Errorf("profile %s: %v", p.Name, err)
		}
		if p.Fleet.Router != experiment.EnvoyRouter() {
			t.Errorf("profile %s runs behind %+v, want experiment.EnvoyRouter()", p.Name, p.Fleet.Router)
		}
		if r := p.Fleet.Workload.Rate / float64(p.Fleet.Engines); strings.HasPrefix(p.Name, "fleet") && r != PerEngineRate {
			t.Errorf("profile %s: %g req/s per engine, want %d", p.Name, r, PerEngineRate)
		}
	}
}

func TestMeasuredSeeds(t *testing.T) {
	seeds, err := measuredSeeds([]uint64{3, 1}, 40, 128)
	if err != nil {
		t.Fatal(err)
	}
	if len(seeds) != 2 || seeds[0].Seed != 3 || seeds[1].Seed != 1 {
		t.Fatalf("seeds %d, %d: want 3 then 1", seeds[0].Seed, seeds[1].Seed)
	}
	for _, sd := range seeds {
		if len(sd.PrefixIDs) != 40 || len(sd.SendAt) != 40 || sd.SendAt[0] != 0 {
			t.Fatalf("seed %d: %d prefixes, %d sends from %v: want the first 40 from 0", sd.Seed, len(sd.PrefixIDs), len(sd.SendAt), sd.SendAt[0])
		}
	}
	if slices.Equal(seeds[0].PrefixIDs, seeds[1].PrefixIDs) {
		t.Fatal("seeds 3 and 1 have the same prefix sequence")
	}
	if _, err := measuredSeeds([]uint64{21}, 500, 128); err == nil || !strings.Contains(err.Error(), "not seed 21") {
		t.Fatalf("seed 21: err = %v, want one saying the published profile has no seed 21", err)
	}
	if _, err := measuredSeeds([]uint64{1}, 501, 128); err == nil || !strings.Contains(err.Error(), "-requests 501") {
		t.Fatalf("501 requests: err = %v, want one naming -requests", err)
	}
	if _, err := measuredSeeds([]uint64{1}, 500, 4); err == nil || !strings.Contains(err.Error(), "-prefixes") {
		t.Fatalf("a 4-prefix pool: err = %v, want one naming -prefixes", err)
	}
}

// arm builds an arm result from per-seed TTFT p95 values.
func arm(name string, p95 ...float64) ArmResult {
	a := ArmResult{Arm: experiment.Arm{Name: name, Policy: "kvaware"}}
	for i, v := range p95 {
		a.Seeds = append(a.Seeds, SeedResult{Seed: uint64(i + 1), Metrics: map[string]float64{capture.TTFTP95: v}})
	}
	return a
}

func ramp(n int, base, step float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = base + step*float64(i%7)
	}
	return out
}

func scale(xs []float64, f float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = x * f
	}
	return out
}

func TestTestsAgainstTheBestOtherArm(t *testing.T) {
	base := ramp(20, 0.3, 0.01)
	noisy := slices.Clone(base)
	for i := range noisy {
		noisy[i] += []float64{-0.02, 0.02}[i%2] // half the seeds lower, half higher
	}
	p := ProfileResult{Arms: []ArmResult{
		arm("slow", scale(base, 1.3)...),
		arm("best", scale(base, 0.9)...),
		arm("second", base...),
		arm("noisy", noisy...),
	}}
	if got := p.Best(); got != 1 {
		t.Fatalf("best arm %d, want 1", got)
	}
	tests := p.Tests()
	want := []struct{ against, verdict string }{
		{"best", VerdictWorse},
		{"second", VerdictBetter}, // the best arm is tested against the runner-up
		{"best", VerdictWorse},
		{"best", VerdictWorse},
	}
	for i, w := range want {
		if tests[i].Against != w.against || tests[i].Verdict != w.verdict {
			t.Errorf("%s: against %s, %s; want against %s, %s (p lower %v, higher %v)", tests[i].Arm, tests[i].Against, tests[i].Verdict, w.against, w.verdict, tests[i].PBetter, tests[i].PWorse)
		}
	}
	if r := tests[1].Reduction; math.Abs(r-0.1) > 1e-9 {
		t.Errorf("best's median reduction against second %v, want 0.10", r)
	}
	tied := ProfileResult{Arms: []ArmResult{arm("a", base...), arm("b", noisy...)}}
	for _, tt := range tied.Tests() {
		if tt.Verdict != VerdictTied {
			t.Errorf("%s against %s: %s, want tied (p lower %v, higher %v)", tt.Arm, tt.Against, tt.Verdict, tt.PBetter, tt.PWorse)
		}
	}
	nan := ProfileResult{Arms: []ArmResult{arm("a", 0.3, math.NaN()), arm("b", math.NaN(), 0.2)}}
	if got := nan.Tests()[0]; got.Verdict != VerdictUntested || got.Note == "" {
		t.Errorf("no paired finite seed: %s (%q), want untested with a note", got.Verdict, got.Note)
	}
	if (ProfileResult{Arms: []ArmResult{arm("alone", base...)}}).Tests() != nil {
		t.Error("one arm alone was tested")
	}
}

func TestRankingPutsUndefinedArmsLast(t *testing.T) {
	p := ProfileResult{Arms: []ArmResult{arm("dead", math.NaN(), math.NaN()), arm("b", 0.4, 0.4), arm("a", 0.2, 0.6), arm("c", 0.3, 0.3)}}
	if got := p.Ranking(); !slices.Equal(got, []int{3, 1, 2, 0}) {
		t.Fatalf("ranking %v, want c, then b and a tied at 0.4 in arm order, then the arm with no value", got)
	}
	rel := p.Relative()
	if rel[3] != 1 || math.Abs(rel[1]-0.4/0.3) > 1e-12 || !math.IsNaN(rel[0]) {
		t.Fatalf("relative %v", rel)
	}
}

// slice is a short tournament: 2 profiles x 2 arms x 2 seeds x 30 requests.
func slice(workers int) Config {
	profs, err := SelectProfiles([]string{"published", "novel"})
	if err != nil {
		panic(err)
	}
	for i := range profs {
		profs[i].Fleet.Workload.Requests = 30
	}
	return Config{Profiles: profs, Arms: []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}, {Name: "loadaware-b1", Policy: "loadaware", Beta: 1}},
		Seeds: []uint64{1, 2}, SampleInterval: DefaultSampleInterval, Workers: workers}
}

// The short slice runs end to end and the report has its shape: every
// profile, arm and seed, every metric, the summary and the tests; equal
// configs give equal reports whatever the worker count.
func TestShortTournamentReportShape(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 4 cells")
	}
	reports := map[int][2]string{}
	for _, workers := range []int{1, 2} {
		res, err := Run(context.Background(), slice(workers))
		if err != nil {
			t.Fatal(err)
		}
		var md, js bytes.Buffer
		if err := WriteMarkdown(&md, res, ReportOptions{Figure: "t.png", JSON: "t.json"}); err != nil {
			t.Fatal(err)
		}
		if err := WriteJSON(&js, res); err != nil {
			t.Fatal(err)
		}
		reports[workers] = [2]string{md.String(), js.String()}
	}
	if reports[1] != reports[2] {
		t.Fatal("1 and 2 workers gave different reports")
	}
	md, js := reports[1][0], reports[1][1]
	for _, want := range []string{"# Policy tournament", "## Summary", "| arm | published | novel |", "| kvaware |", "| loadaware-b1 |",
		"## published", "## novel", "TTFT p95 (s)", "goodput ≤150 ms", "hit rate", "Paired tests", "![", "t.json", "Only 2 seeds", "behind Envoy"} {
		if !strings.Contains(md, want) {
			t.Errorf("the report has no %q", want)
		}
	}
	var doc struct {
		Profiles []struct {
			Name string
			Arms []struct {
				Arm   string
				Seeds []map[string]*float64
			}
			Tests []struct{ Arm, Against, Verdict string }
		}
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Profiles) != 2 || doc.Profiles[0].Name != "published" || doc.Profiles[1].Name != "novel" {
		t.Fatalf("JSON profiles %+v", doc.Profiles)
	}
	for _, p := range doc.Profiles {
		if len(p.Arms) != 2 || len(p.Tests) != 2 {
			t.Fatalf("profile %s: %d arms, %d tests: want 2 each", p.Name, len(p.Arms), len(p.Tests))
		}
		for _, a := range p.Arms {
			if len(a.Seeds) != 2 {
				t.Fatalf("%s/%s: %d seeds, want 2", p.Name, a.Arm, len(a.Seeds))
			}
			for i, s := range a.Seeds {
				if s["seed"] == nil || *s["seed"] != float64(i+1) {
					t.Fatalf("%s/%s seed #%d is %v", p.Name, a.Arm, i, s["seed"])
				}
				for _, m := range []string{capture.TTFTP95, capture.TTFTP50, capture.ReqS} {
					if v, ok := s[m]; !ok || v == nil || !(*v > 0) {
						t.Errorf("%s/%s seed %d: %s = %v, want a positive number", p.Name, a.Arm, i+1, m, v)
					}
				}
				if v := s[GoodputKey]; v == nil || *v < 0 { // 0 on novel prompts: their prefill alone exceeds 150 ms
					t.Errorf("%s/%s seed %d: goodput %v, want a number >= 0", p.Name, a.Arm, i+1, v)
				}
				for _, m := range []string{capture.ImbalanceKey, HitRateKey} {
					if _, ok := s[m]; !ok {
						t.Errorf("%s/%s seed %d: no %s", p.Name, a.Arm, i+1, m)
					}
				}
			}
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := slice(1)
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no profiles", func(c *Config) { c.Profiles = nil }, "no profiles"},
		{"no arms", func(c *Config) { c.Arms = nil }, "no arms"},
		{"no seeds", func(c *Config) { c.Seeds = nil }, "no seeds"},
		{"no sample interval", func(c *Config) { c.SampleInterval = 0 }, "sample interval"},
		{"a profile twice", func(c *Config) { c.Profiles = append(c.Profiles, c.Profiles[0]) }, "repeated"},
		{"a bad fleet names its profile", func(c *Config) { c.Profiles[1].Fleet.Engines = 0 }, "profile novel"},
		{"a replay of a novel workload", func(c *Config) { c.Profiles[0].Fleet.Workload.Profile = "novel" }, "must be the shared profile"},
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := slice(1)
			tt.edit(&c)
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestGIENote(t *testing.T) {
	arms := func(as ...experiment.Arm) Result {
		var p ProfileResult
		for _, a := range as {
			p.Arms = append(p.Arms, ArmResult{Arm: a})
		}
		return Result{Profiles: []ProfileResult{p}}
	}
	kv := experiment.Arm{Name: "kvaware", Policy: "kvaware"}
	gie := experiment.Arm{Name: "gie", Policy: experiment.PolicyGIE}
	tests := []struct {
		name string
		res  Result
		want string // a substring; "" wants no note
	}{
		{"no profiles", Result{}, ""},
		{"our arms only", arms(kv), ""},
		{"with gie", arms(kv, gie), "Arm `gie` is GIE v1.5.0's own scheduler"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := gieNote(tc.res)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("gieNote = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestExtraProfilesRunWhenNamed: the lora profile is selected by name only, with its
// adapters, slots and residency cost set.
func TestExtraProfilesRunWhenNamed(t *testing.T) {
	for _, p := range Profiles() {
		if p.Name == "lora" {
			t.Fatal("the lora profile is in the default set")
		}
	}
	ps, err := SelectProfiles([]string{"lora"})
	if err != nil {
		t.Fatal(err)
	}
	f := ps[0].Fleet
	if f.Workload.Adapters != LoRAAdapters || f.Engine.MaxLoRAs != LoRASlots || f.Engines != 4 || f.AdapterCost == (picker.AdapterCost{}) {
		t.Fatalf("lora profile %+v", f)
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
}
