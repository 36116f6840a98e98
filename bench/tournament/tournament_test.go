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
	"github.com/loadaware/loadaware-epp/bench/workload"
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

func TestScaleLadder(t *testing.T) {
	cases := []struct {
		name      string
		published []float64
		capacity  float64
		want      []float64
		scale     float64
	}{
		{"within capacity runs as published", []float64{0.1, 0.2}, 0.5, []float64{0.1, 0.2}, 1},
		{"top at capacity runs as published", []float64{0.1, 0.5}, 0.5, []float64{0.1, 0.5}, 1},
		{"past capacity: top at 1.25x", []float64{3, 30, 60}, 0.4, []float64{0.025, 0.25, 0.5}, 0.4 * KneeHeadroom / 60},
		{"rounded to 3 digits", []float64{1, 3}, 1, []float64{0.417, 1.25}, KneeHeadroom / 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, scale := ScaleLadder(c.published, c.capacity)
			if !slices.Equal(got, c.want) || math.Abs(scale-c.scale) > 1e-12 {
				t.Fatalf("got %v (scale %g), want %v (scale %g)", got, scale, c.want, c.scale)
			}
		})
	}
}

// ladderResult is a ladder of len(p90s[0]) points and one arm per row of
// p90s, with TTFT p90 p90s[arm][point] and input tok/s 100*(point+1) on two
// seeds.
func ladderResult(p90s ...[]float64) Result {
	res := Result{Seeds: []uint64{1, 2}}
	for i := range p90s[0] {
		pr := ProfileResult{Profile: Profile{Name: "x"}}
		for a, row := range p90s {
			ar := ArmResult{Arm: experiment.Arm{Name: string(rune('a' + a))}}
			for _, s := range res.Seeds {
				ar.Seeds = append(ar.Seeds, SeedResult{Seed: s, Metrics: map[string]float64{capture.TTFTP90: row[i], InputTokSKey: 100 * float64(i+1)}})
			}
			pr.Arms = append(pr.Arms, ar)
		}
		res.Profiles = append(res.Profiles, pr)
	}
	return res
}

func TestKnees(t *testing.T) {
	rates := []float64{1, 2, 3, 4}
	res := ladderResult(
		[]float64{1, 1.5, 2, 5},          // leaves the floor at 4: knee 3
		[]float64{1, 1.1, 1.2, 1.3},      // never leaves it
		[]float64{1, 2.5, 3, 4},          // leaves it at once: knee 1
		[]float64{math.NaN(), 1, 1, 1},   // no floor
		[]float64{1, 1, math.NaN(), 1.2}, // a point with no value ends the knee
	)
	want := []KneePoint{
		{Floor: 1, Rate: 3, InputTokS: 300},
		{Floor: 1, Rate: 4, InputTokS: 400, Beyond: true},
		{Floor: 1, Rate: 1, InputTokS: 100},
		{Floor: math.NaN(), Rate: math.NaN(), InputTokS: math.NaN()},
		{Floor: 1, Rate: 2, InputTokS: 200},
	}
	got := Knees(res, rates)
	same := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
	for i, w := range want {
		g := got[i]
		if !same(g.Floor, w.Floor) || !same(g.Rate, w.Rate) || !same(g.InputTokS, w.InputTokS) || g.Beyond != w.Beyond {
			t.Errorf("arm %d: got %+v, want %+v", i, g, w)
		}
	}
}

func TestWriteKnee(t *testing.T) {
	res := ladderResult([]float64{1, 1.5, 2, 5}, []float64{1, 1.1, 1.2, 1.3})
	res.Profiles[0].Profile = FileProfile(workload.File{Name: "x", Config: workload.DefaultConfig()})
	cases := []struct {
		name string
		k    Knee
		want []string
	}{
		{"scaled", Knee{Name: "x", Published: []float64{10, 20, 30, 40}, Rates: []float64{1, 2, 3, 4}, Scale: 0.1, Capacity: 3.2, Offered: 40},
			[]string{"# Knee: x", "**The published ladder (10, 20, 30, 40 req/s) exceeds this fleet's capacity**", "scaled by 0.1", "| offered req/s | published | a TTFT p90 (s) | a input tok/s | b TTFT p90 (s) |",
				"| 3 | 30 | 2.000 | 300 |", "| a | 1.000 | 3.000 | 300 |", "| b | 1.000 | past 4 | 400 |", "capacity is 3.2 req/s", "offered 40 req/s"}},
		{"as published", Knee{Name: "x", Published: []float64{1, 2, 3, 4}, Rates: []float64{1, 2, 3, 4}, Scale: 1, Capacity: 9, Offered: 40},
			[]string{"is within the fleet's capacity and runs as published"}},
		{"given", Knee{Name: "x", Rates: []float64{1, 2, 3, 4}, Scale: 1, Capacity: 9, Offered: 40},
			[]string{"The ladder was given: 1, 2, 3, 4 req/s.", "| offered req/s | a TTFT p90 (s) |", "| 3 | 2.000 | 300 |"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteKnee(&b, res, c.k, ReportOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("no %q in\n%s", w, b.String())
				}
			}
		})
	}
	if err := WriteKnee(&bytes.Buffer{}, res, Knee{Rates: []float64{1}}, ReportOptions{}); err == nil {
		t.Fatal("a knee of 1 rate over 4 results was written")
	}
}

// Capacity is what an overloaded fleet completes, below what was offered;
// a fleet that keeps up is refused.
func TestCapacity(t *testing.T) {
	p := FileProfile(workload.File{Name: "x", Config: workload.DefaultConfig()})
	p.Fleet.Workload.Profile = workload.ProfileNovel
	p.Fleet.Workload.Requests = 40
	got, err := Capacity(context.Background(), p, 200, DefaultSampleInterval)
	if err != nil {
		t.Fatal(err)
	}
	if !(got > 1 && got < 100) {
		t.Fatalf("capacity %g req/s of 2,080-token prompts on 2 engines offered 200: want 1-100", got)
	}
	if _, err := Capacity(context.Background(), p, got/4, DefaultSampleInterval); err == nil || !strings.Contains(err.Error(), "kept up") {
		t.Fatalf("offered a quarter of the capacity: %v, want the fleet kept up", err)
	}
}

func TestLadderProfiles(t *testing.T) {
	p := FileProfile(workload.File{Name: "x", Config: workload.DefaultConfig()})
	got := LadderProfiles(p, []float64{0.5, 1.25})
	if len(got) != 2 || got[0].Name != "x@0.5" || got[1].Name != "x@1.25" || got[0].Fleet.Workload.Rate != 0.5 || got[1].Fleet.Workload.Rate != 1.25 || p.Fleet.Workload.Rate != workload.DefaultConfig().Rate {
		t.Fatalf("ladder profiles %+v", got)
	}
}
