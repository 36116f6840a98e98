package tournament

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

func TestDrawShapesIsDeterministicPerSeed(t *testing.T) {
	a, b := DrawShapes(DefaultHoldoutSeed, 8), DrawShapes(DefaultHoldoutSeed, 8)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two draws of the same seed differ")
	}
	if short := DrawShapes(DefaultHoldoutSeed, 3); !reflect.DeepEqual(short, a[:3]) {
		t.Fatal("a draw of 3 is not the first 3 of a draw of 8: shape i must depend on the seed and i only")
	}
	other := DrawShapes(DefaultHoldoutSeed+1, 8)
	same := 0
	for i := range a {
		if reflect.DeepEqual(a[i], other[i]) {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("seeds %d and %d drew %d equal shapes of 8", DefaultHoldoutSeed, DefaultHoldoutSeed+1, same)
	}
	for i := 1; i < len(a); i++ {
		if reflect.DeepEqual(a[i], a[0]) {
			t.Fatalf("shapes 0 and %d of one draw are equal", i)
		}
	}
}

// Every drawn shape lies in the declared space and makes a valid profile;
// over many draws every feature of the space occurs.
func TestDrawnShapesStayInTheSpaceAndCoverIt(t *testing.T) {
	seen := map[string]bool{}
	for seed := uint64(1); seed <= 40; seed++ {
		for i, s := range DrawShapes(seed, 10) {
			name := fmt.Sprintf("seed %d shape %d", seed, i)
			checkShape(t, name, s)
			fleet := s.Fleet(1.5)
			cfg := Config{Profiles: []Profile{{Name: name, Fleet: fleet}}, Arms: DefaultArms(), Seeds: []uint64{1}, SampleInterval: DefaultSampleInterval}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("%s: %v (%+v)", name, err, s)
			}
			if fleet.Router != experiment.EnvoyRouter() || fleet.Workload.Rate != 1.5 || fleet.Workload.Requests != HoldoutRequestsPerEngine*len(s.Slowdowns) {
				t.Fatalf("%s: fleet behind %+v at %g req/s with %d requests", name, fleet.Router, fleet.Workload.Rate, fleet.Workload.Requests)
			}
			if (s.Turns > 0) != (fleet.Workload.Profile == workload.ProfileChat) {
				t.Fatalf("%s: %d turns on the %s profile", name, s.Turns, fleet.Workload.Profile)
			}
			ws := s.Prefixes * s.PrefixTokens
			features := map[string]bool{
				"2 engines": len(s.Slowdowns) == 2, "8 engines": len(s.Slowdowns) == 8, "factor 1.6": slices.Contains(s.Slowdowns, 1.6),
				"no CPU tier": s.CPUTierBytes == 0, "16 GiB tier": s.CPUTierBytes == 16<<30,
				"pool below the working set": s.KVPoolTokens < ws, "pool above the working set": s.KVPoolTokens > ws,
				"1 prefix": s.Prefixes == 1, "over 150 prefixes": s.Prefixes > 150, "prefixes over 12,000 tokens": s.PrefixTokens > 12000,
				"varied prefix lengths": s.PrefixTokensMax > 0, "uniform": s.ZipfS == 0, "Zipf": s.ZipfS > 0,
				"chat": s.Turns > 0, "bursts": s.BurstEvery > 0, "Poisson": s.BurstEvery == 0,
				"under 30% load": s.Load < 0.3, "over 100% load": s.Load > 1, "outputs over 512": s.OutputTokens > 512,
			}
			for f, ok := range features {
				seen[f] = seen[f] || ok
			}
		}
	}
	for _, f := range []string{"2 engines", "8 engines", "factor 1.6", "no CPU tier", "16 GiB tier", "pool below the working set", "pool above the working set",
		"1 prefix", "over 150 prefixes", "prefixes over 12,000 tokens", "varied prefix lengths", "uniform", "Zipf", "chat", "bursts", "Poisson",
		"under 30% load", "over 100% load", "outputs over 512"} {
		if !seen[f] {
			t.Errorf("400 shapes drew none with %s", f)
		}
	}
}

// Every draw is a valid profile, over far more seeds than the coverage test
// runs: seed 20261213's h01 once drew a 10 s burst in a 10 s period, which the
// workload refuses, so that draw's whole tournament failed before its first cell.
func TestEveryDrawIsAValidProfile(t *testing.T) {
	seeds := []uint64{20261213}
	for seed := uint64(1); seed <= 3000; seed++ {
		seeds = append(seeds, seed, 20261100+seed)
	}
	for _, seed := range seeds {
		for i, s := range DrawShapes(seed, 12) {
			cfg := Config{Profiles: []Profile{{Name: HoldoutName(i), Fleet: s.Fleet(1.5)}}, Arms: DefaultArms(), Seeds: []uint64{1}, SampleInterval: DefaultSampleInterval}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("seed %d shape %s: %v (%+v)", seed, HoldoutName(i), err, s)
			}
		}
	}
}

// checkShape fails when s leaves the space HoldoutSpace declares.
func checkShape(t *testing.T, name string, s Shape) {
	t.Helper()
	fail := func(what string) { t.Fatalf("%s: %s (%+v)", name, what, s) }
	if n := len(s.Slowdowns); n < 2 || n > 8 {
		fail("engines outside 2-8")
	}
	mixOK := false
	for _, mix := range holdoutMixes {
		in := true
		for _, f := range s.Slowdowns {
			in = in && slices.Contains(mix, f)
		}
		mixOK = mixOK || in
	}
	if !mixOK {
		fail("step-time factors from no declared mix")
	}
	longest := max(s.PrefixTokens, s.PrefixTokensMax) + 1 + s.SuffixTokens + s.OutputTokens
	if s.Turns > 0 {
		longest += (s.Turns - 1) * (s.SuffixTokens + s.OutputTokens + 2)
	}
	switch {
	case s.KVPoolTokens%16 != 0 || s.KVPoolTokens < 2*longest || (s.KVPoolTokens > 393216 && s.KVPoolTokens > 2*longest+15):
		fail("GPU pool not a whole number of blocks in 16,384-393,216 tokens or just over twice the longest sequence")
	case s.CPUTierBytes != 0 && !slices.Contains([]int64{1 << 30, 2 << 30, 4 << 30, 8 << 30, 16 << 30}, s.CPUTierBytes):
		fail("CPU tier not none or 1-16 GiB")
	case s.Prefixes < 1 || s.Prefixes > 200:
		fail("prefixes outside 1-200")
	case s.PrefixTokens < 200 || s.PrefixTokens > 16000 || (s.PrefixTokensMax != 0 && (s.PrefixTokensMax < s.PrefixTokens || s.PrefixTokensMax > 16000)):
		fail("prefix lengths outside 200-16,000")
	case s.ZipfS != 0 && (s.ZipfS < 0.6 || s.ZipfS > 1.2):
		fail("Zipf exponent outside 0.6-1.2")
	case s.SuffixTokens < 32 || s.SuffixTokens > 2048 || s.OutputTokens < 16 || s.OutputTokens > 1024:
		fail("suffix or output length outside the space")
	case s.Turns != 0 && (s.Turns < 2 || s.Turns > 8 || s.ThinkTime < 2*time.Second || s.ThinkTime > 10*time.Second || s.BurstEvery != 0):
		fail("chat outside 2-8 turns, 2-10 s think time, or bursty")
	case longest > HoldoutContext:
		fail("longest sequence over the context")
	case s.BurstEvery != 0 && (s.BurstEvery < 10*time.Second || s.BurstEvery > 40*time.Second || s.BurstLen < 2*time.Second || s.BurstLen > 10*time.Second || s.BurstFactor < 2 || s.BurstFactor > 4):
		fail("bursts outside 2-10 s at 2-4x every 10-40 s")
	case s.Load < 0.2 || s.Load > 1.1:
		fail("load outside 20-110% of capacity")
	}
}

// The declared space in the report is the one the constants draw from.
func TestHoldoutSpaceStatesTheBounds(t *testing.T) {
	for _, want := range []string{
		fmt.Sprintf("%d-%d engines", holdoutMinEngines, holdoutMaxEngines),
		thousands(holdoutMinPool) + "-" + thousands(holdoutMaxPool) + " tokens",
		fmt.Sprintf("1-%d (log-uniform)", holdoutMaxPrefixes),
		thousands(holdoutMinPrefix) + "-" + thousands(holdoutMaxPrefix) + " tokens",
		fmt.Sprintf("%d-%s tokens and output %d-%s tokens", holdoutMinSuffix, thousands(holdoutMaxSuffix), holdoutMinOutput, thousands(holdoutMaxOutput)),
		fmt.Sprintf("%d-%d turns", holdoutMinTurns, holdoutMaxTurns),
		thousands(HoldoutContext) + "-token context",
		fmt.Sprintf("%.0f-%.0f%% of the fleet's capacity", 100*holdoutMinLoad, 100*holdoutMaxLoad),
		fmt.Sprintf("offered %.0f req/s per engine", holdoutOffered),
		fmt.Sprintf("%d requests per engine", HoldoutRequestsPerEngine),
	} {
		if !strings.Contains(HoldoutSpace, want) {
			t.Errorf("HoldoutSpace does not say %q", want)
		}
	}
}

// A tiny held-out run: the first 2 shapes of the default draw, cut to 10
// requests per engine, each at its share of its measured capacity, run
// through the tournament with 2 arms x 2 seeds; the report names the draw,
// each shape's parameters and the targets.
func TestHeldOutProfilesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 2 capacity cells and 4 tournament cells")
	}
	ctx := context.Background()
	var profs []Profile
	for i, s := range DrawShapes(DefaultHoldoutSeed, 2) {
		p, err := holdoutProfile(ctx, DefaultHoldoutSeed, i, s, 10, DefaultSampleInterval)
		if err != nil {
			t.Fatal(err)
		}
		if p.Name != HoldoutName(i) || !(p.Fleet.Workload.Rate > 0) || !strings.Contains(p.About, fmt.Sprintf("offered %.0f%%", 100*s.Load)) {
			t.Fatalf("profile %s at %g req/s: %s", p.Name, p.Fleet.Workload.Rate, p.About)
		}
		profs = append(profs, p)
	}
	arms := []experiment.Arm{{Name: "ttftaware", Policy: "ttftaware"}, {Name: "kvaware", Policy: "kvaware"}}
	res, err := Run(ctx, Config{Profiles: profs, Arms: arms, Seeds: []uint64{1, 2}, SampleInterval: DefaultSampleInterval})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Profiles {
		for _, a := range p.Arms {
			for _, s := range a.Seeds {
				if n := s.Metrics[capture.Errors]; n != 0 || !(s.Metrics[capture.TTFTP95] > 0) {
					t.Errorf("%s/%s seed %d: %v errors, TTFT p95 %v", p.Profile.Name, a.Arm.Name, s.Seed, n, s.Metrics[capture.TTFTP95])
				}
			}
		}
	}
	var md bytes.Buffer
	if err := WriteHoldoutMarkdown(&md, res, DefaultHoldoutSeed, ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# Held-out random-shape check", fmt.Sprintf("with seed %d", DefaultHoldoutSeed), "### The space", "## The first target",
		"| h01 |", "| h02 |", "## h01", "Held-out shape 1 of seed", "p95 / kvaware", "## Summary"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the report has no %q", want)
		}
	}
}

// targetResult is one profile whose arms have the given per-seed TTFT p95
// (and p99 = p95 times p99x).
func targetResult(arms map[string][]float64, order []string, p99x map[string]float64) Result {
	p := ProfileResult{Profile: Profile{Name: "x"}}
	for _, name := range order {
		a := ArmResult{Arm: experiment.Arm{Name: name, Policy: strings.TrimSuffix(name, "-b1")}}
		f := p99x[name]
		if f == 0 {
			f = 1.5
		}
		for i, v := range arms[name] {
			a.Seeds = append(a.Seeds, SeedResult{Seed: uint64(i + 1), Metrics: map[string]float64{capture.TTFTP95: v, capture.TTFTP99: v * f}})
		}
		p.Arms = append(p.Arms, a)
	}
	return Result{Seeds: []uint64{1}, Profiles: []ProfileResult{p}}
}

func TestTargets(t *testing.T) {
	base := ramp(20, 0.3, 0.01)
	noisy := slices.Clone(base)
	for i := range noisy {
		noisy[i] += []float64{-0.02, 0.02}[i%2]
	}
	order := []string{"ttftaware", "kvaware", "loadaware-b1"}
	tests := []struct {
		name     string
		arms     map[string][]float64
		p99x     map[string]float64
		winner   string
		verdict  string
		met      bool
		ratioP95 float64 // against kvaware
	}{
		{"best everywhere", map[string][]float64{"ttftaware": scale(base, 0.9), "kvaware": base, "loadaware-b1": scale(base, 1.2)}, nil, "ttftaware", "best", true, 0.9},
		{"tied, within 2%", map[string][]float64{"ttftaware": scale(noisy, 1.01), "kvaware": base, "loadaware-b1": scale(base, 1.2)}, nil, "kvaware", VerdictTied, true, math.NaN()},
		{"worse by 5%", map[string][]float64{"ttftaware": scale(base, 1.05), "kvaware": base, "loadaware-b1": scale(base, 1.2)}, nil, "kvaware", VerdictWorse, false, 1.05},
		{"best on p95, p99 3% over loadaware-b1", map[string][]float64{"ttftaware": scale(base, 0.9), "kvaware": base, "loadaware-b1": base},
			map[string]float64{"ttftaware": 1.5 * 1.03 / 0.9}, "ttftaware", "best", false, 0.9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := targetResult(tt.arms, order, tt.p99x)
			ts, cand := Targets(res, [][]Test{res.Profiles[0].Tests()})
			if cand != "ttftaware" || len(ts) != 1 {
				t.Fatalf("candidate %q, %d targets", cand, len(ts))
			}
			got := ts[0]
			if got.Winner != tt.winner || got.Verdict != tt.verdict || got.MarginMet() != tt.met || len(got.Refs) != 2 {
				t.Fatalf("got %+v: want winner %s, verdict %s, 2%% rule %v against 2 references", got, tt.winner, tt.verdict, tt.met)
			}
			if got.BestOrTied() != (tt.verdict != VerdictWorse) {
				t.Errorf("best or tied = %v with verdict %s", got.BestOrTied(), got.Verdict)
			}
			if !math.IsNaN(tt.ratioP95) && math.Abs(got.Refs[0].P95-tt.ratioP95) > 1e-9 {
				t.Errorf("p95 over kvaware %v, want %v", got.Refs[0].P95, tt.ratioP95)
			}
		})
	}
	none := targetResult(map[string][]float64{"kvaware": base, "loadaware-b1": base}, []string{"kvaware", "loadaware-b1"}, nil)
	if ts, cand := Targets(none, [][]Test{none.Profiles[0].Tests()}); ts != nil || cand != "" {
		t.Errorf("no recommended arm: %v, %q; want nothing", ts, cand)
	}
	var md bytes.Buffer
	if err := WriteHoldoutMarkdown(&md, none, 7, ReportOptions{}); err != nil || !strings.Contains(md.String(), "No arm runs the recommended policy") {
		t.Errorf("report without the recommended arm: %v\n%s", err, md.String())
	}
}

// The tournament's own report is unchanged by the held-out writer: its
// title and no targets table.
func TestTournamentReportHasNoHoldoutParts(t *testing.T) {
	res := targetResult(map[string][]float64{"ttftaware": {0.2, 0.3}, "kvaware": {0.3, 0.4}}, []string{"ttftaware", "kvaware"}, nil)
	var md bytes.Buffer
	if err := WriteMarkdown(&md, res, ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(md.String(), "# Policy tournament\n\n") || strings.Contains(md.String(), "first target") || strings.Contains(md.String(), "The space") {
		t.Fatalf("the tournament report changed:\n%s", md.String())
	}
}
