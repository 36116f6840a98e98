package tournament

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/vtime"
	"github.com/loadaware/loadaware-epp/picker"
)

// TestDiagTail is a diagnostic (LOADAWARE_DIAG_TAIL=holdout:SEED:hNN, or profile:NAME for
// a tournament profile; arms in LOADAWARE_DIAG_ARMS, default ttftaware,loadaware-b1; seeds
// F-N with LOADAWARE_DIAG_SEEDS=N, default 10, and LOADAWARE_DIAG_FIRST=F, default 1; the
// tail from the quantile LOADAWARE_DIAG_QUANTILE, default 0.95): per arm and seed, the TTFT
// p95 and p99, each engine's share of the requests, and the requests at or above the seed's
// quantile: their engine, whether their prefix was computed (cold), held on the GPU or
// loaded from the CPU tier, and their TTFT; then over all seeds, the tail's requests by
// engine and by kind. The seeds of one run share the engines in sequence, so a run from
// seed F is not seeds F-N of a run from seed 1.
func TestDiagTail(t *testing.T) {
	spec := os.Getenv("LOADAWARE_DIAG_TAIL")
	if spec == "" {
		t.Skip("diagnostic: set LOADAWARE_DIAG_TAIL=holdout:20261211:h07")
	}
	// holdout:SEED:hNN names a held-out shape; profile:NAME a tournament profile.
	f := strings.Split(spec, ":")
	var ps []Profile
	var want string
	var err error
	switch {
	case len(f) == 2 && f[0] == "profile":
		ps, err = SelectProfiles([]string{f[1]})
		want = f[1]
	case len(f) == 3 && f[0] == "holdout":
		seed, perr := strconv.ParseUint(f[1], 10, 64)
		if perr != nil {
			t.Fatal(perr)
		}
		ps, err = HoldoutProfiles(context.Background(), seed, 12, 250e6)
		want = f[2]
	default:
		t.Fatalf("want holdout:SEED:hNN or profile:NAME, got %q", spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	var prof Profile
	for _, p := range ps {
		if p.Name == want {
			prof = p
		}
	}
	if prof.Name == "" {
		t.Fatalf("no profile %q", spec)
	}
	last := uint64(10)
	if s := os.Getenv("LOADAWARE_DIAG_SEEDS"); s != "" {
		if last, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	first := uint64(1)
	if s := os.Getenv("LOADAWARE_DIAG_FIRST"); s != "" {
		if first, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	quantile := 0.95
	if s := os.Getenv("LOADAWARE_DIAG_QUANTILE"); s != "" {
		if quantile, err = strconv.ParseFloat(s, 64); err != nil || quantile <= 0 || quantile > 1 {
			t.Fatalf("LOADAWARE_DIAG_QUANTILE=%q: want a number in (0, 1]", s)
		}
	}
	names := "ttftaware,loadaware-b1"
	if s := os.Getenv("LOADAWARE_DIAG_ARMS"); s != "" {
		names = s
	}
	arms, err := experiment.ParseArms(names)
	if err != nil {
		t.Fatal(err)
	}
	seeds := experiment.SeedRange(first, last)
	t.Logf("%s: %s", prof.Name, prof.About)
	for _, arm := range arms {
		cs, err := cellSeeds(prof, seeds)
		if err != nil {
			t.Fatal(err)
		}
		cc := vtime.CellConfig{Sweep: prof.Fleet, Arm: arm, Seeds: cs, SampleInterval: 250e6, Warmup: prof.Trace == nil}
		cc.Sweep.Arms, cc.Sweep.Seeds = []experiment.Arm{arm}, seeds
		// Each decision: how many candidates the index shows holding half the prompt or
		// more, and whether the winner is one of them; by winner.
		holders, reasons := map[int]int{}, map[string]int{}
		winHeld, winCold := map[string]int{}, map[string]int{}
		vtime.PickSeen = func(tokens []uint32, d *picker.Decision, _ map[string]int) {
			n, won := 0, false
			for i, r := range d.Ranked {
				if 2*r.Matched >= len(tokens) {
					n++
					won = won || i == 0
				}
			}
			holders[n]++
			reasons[d.Ranked[0].Reason]++
			if won {
				winHeld[d.Endpoints[0]]++
			} else {
				winCold[d.Endpoints[0]]++
			}
		}
		cr, err := vtime.RunCell(context.Background(), cc)
		vtime.PickSeen = nil
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s decisions: candidates shown holding half the prompt: %v; winner a holder, by engine %v; winner not a holder %v; reasons %v", arm.Name, holders, winHeld, winCold, reasons)
		tailBy := map[string]int{}
		placed := map[int]map[string]int{} // prefix -> engine -> requests, over the seeds
		kindBy := map[string]int{}
		var allN int
		for _, run := range cr.Runs {
			ttfts := []float64{}
			share := map[string]int{}
			for _, r := range run.Rows {
				if !math.IsNaN(r.TTFT) {
					ttfts = append(ttfts, r.TTFT)
				}
				share[r.Engine]++
				if placed[r.PrefixID] == nil {
					placed[r.PrefixID] = map[string]int{}
				}
				placed[r.PrefixID][r.Engine]++
			}
			sort.Float64s(ttfts)
			p95 := ttfts[int(math.Ceil(0.95*float64(len(ttfts))))-1]
			from := ttfts[int(math.Ceil(quantile*float64(len(ttfts))))-1]
			var sb strings.Builder
			for _, a := range cr.Addrs {
				fmt.Fprintf(&sb, " %s:%d", a, share[a])
			}
			t.Logf("%s seed %d: n=%d p95 %.3fs p99 %.3fs median %.3fs; requests by engine%s", arm.Name, run.Seed, len(ttfts), p95,
				ttfts[int(math.Ceil(0.99*float64(len(ttfts))))-1], ttfts[len(ttfts)/2], sb.String())
			for _, r := range run.Rows {
				if math.IsNaN(r.TTFT) || r.TTFT < from {
					continue
				}
				kind := "cold"
				switch {
				case r.CachedTokens >= r.PromptTokens/2:
					kind = "gpu"
				case r.LoadedTokens+r.CachedTokens >= r.PromptTokens/2:
					kind = "cpu"
				}
				tailBy[r.Engine]++
				kindBy[kind]++
				allN++
				t.Logf("  tail: t=%.2fs prefix %d engine %s ttft %.3fs prompt %d cached %d loaded %d (%s)", r.SendAt, r.PrefixID, r.Engine, r.TTFT, r.PromptTokens, r.CachedTokens, r.LoadedTokens, kind)
			}
		}
		t.Logf("%s: %d tail requests; by engine %v; by kind %v", arm.Name, allN, tailBy, kindBy)
		for id := 0; id < len(placed)+1; id++ {
			if placed[id] != nil {
				t.Logf("%s: prefix %d's requests by engine %v", arm.Name, id, placed[id])
			}
		}
	}
}
