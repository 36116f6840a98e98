package tournament

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/plot"
)

// TargetReferences are the arms the 2% rule compares the
// recommended policy with: it must not be more than TargetMargin worse than
// either on median TTFT p95 or p99.
var TargetReferences = []string{"kvaware", "loadaware-b1"}

// TargetMargin is the 2% rule's margin.
const TargetMargin = 0.02

// Target is the first target on one profile for the candidate arm
// (the first arm of the recommended policy, experiment.RecommendedPolicy):
// best or statistically tied for best TTFT p95, and never more than
// TargetMargin worse than each of TargetReferences on TTFT p95 or p99.
type Target struct {
	Profile, Winner string
	Ratio           float64 // the candidate's median TTFT p95 over the winner's
	Verdict         string  // "best", or the candidate's paired-test verdict against the winner (VerdictTied passes)
	Refs            []RefRatio
}

// RefRatio is the candidate's median TTFT p95 and p99 over one reference
// arm's; Met when neither exceeds 1 + TargetMargin.
type RefRatio struct {
	Arm      string
	P95, P99 float64
	Met      bool
}

// BestOrTied reports whether the candidate is the winner or tied with it.
func (t Target) BestOrTied() bool { return t.Verdict == "best" || t.Verdict == VerdictTied }

// MarginMet reports whether the 2% rule holds against every reference
// present.
func (t Target) MarginMet() bool {
	for _, r := range t.Refs {
		if !r.Met {
			return false
		}
	}
	return true
}

// Targets returns the candidate's Target on every profile of res, given each
// profile's Tests, and the candidate's name; references absent from the
// arms are left out. It returns nil and "" when no arm runs the recommended
// policy.
func Targets(res Result, tests [][]Test) ([]Target, string) {
	if len(res.Profiles) == 0 {
		return nil, ""
	}
	cand, refs := -1, map[string]int{}
	for i, a := range res.Profiles[0].Arms {
		if a.Arm.Policy == experiment.RecommendedPolicy && cand < 0 {
			cand = i
		}
		refs[a.Arm.Name] = i
	}
	if cand < 0 {
		return nil, ""
	}
	var out []Target
	for j, p := range res.Profiles {
		best := p.Best()
		t := Target{Profile: p.Profile.Name, Winner: p.Arms[best].Arm.Name, Ratio: p.Relative()[cand], Verdict: "best"}
		if best != cand {
			t.Verdict = tests[j][cand].Verdict
		}
		c := p.Arms[cand]
		for _, name := range TargetReferences {
			r, ok := refs[name]
			if !ok {
				continue
			}
			rr := RefRatio{Arm: name, P95: c.Median(capture.TTFTP95) / p.Arms[r].Median(capture.TTFTP95),
				P99: c.Median(capture.TTFTP99) / p.Arms[r].Median(capture.TTFTP99)}
			rr.Met = rr.P95 <= 1+TargetMargin && rr.P99 <= 1+TargetMargin
			t.Refs = append(t.Refs, rr)
		}
		out = append(out, t)
	}
	return out, res.Profiles[0].Arms[cand].Arm.Name
}

// WriteHoldoutFiles writes the held-out check's report as WriteFiles writes
// the tournament's, under its own title, with the draw (seed, count) stated
// first and the targets table after the summary.
func WriteHoldoutFiles(res Result, seed uint64, out, jsonOut, command string) error {
	return writeFiles(res, out, jsonOut, command, func(fig string) error {
		return plot.Heatmap(fig, fmt.Sprintf("Held-out shapes: TTFT p95 relative to the profile's best (colour saturates at %gx)", FigureMax), Summarize(res).Figure())
	}, func(w io.Writer, opt ReportOptions) error { return WriteHoldoutMarkdown(w, res, seed, opt) })
}

// WriteHoldoutMarkdown writes the held-out check's report: WriteMarkdown's,
// titled as the held-out check, the draw stated first and the targets table
// (Targets) after the summary.
func WriteHoldoutMarkdown(w io.Writer, res Result, seed uint64, opt ReportOptions) error {
	lead := func(b *bufio.Writer) {
		fmt.Fprintf(b, "%d profiles drawn at random with seed %d, fixed before any of them ran, from the shape space that `bench/tournament/holdout.go` declares and `docs/decisions/1620-held-out-random-shapes.md` explains. ", len(res.Profiles), seed)
		b.WriteString("No policy was tuned on them: they are reported, not trained on. Each profile's section names its drawn parameters.\n\n")
		b.WriteString("### The space\n\n" + HoldoutSpace + "\n")
	}
	return writeMarkdown(w, res, opt, "Held-out random-shape check", lead, func(b *bufio.Writer, tests [][]Test) { writeTargets(b, res, tests) })
}

func writeTargets(b *bufio.Writer, res Result, tests [][]Test) {
	ts, cand := Targets(res, tests)
	b.WriteString("## The first target, profile by profile\n\n")
	if ts == nil {
		fmt.Fprintf(b, "No arm runs the recommended policy (%s): nothing to check.\n\n", experiment.RecommendedPolicy)
		return
	}
	fmt.Fprintf(b, "The recommended policy's arm `%s`: best or tied for best median TTFT p95 (paired Wilcoxon at p < 0.025), and its median TTFT p95 and p99 at most %.0f%% above each of %s (the 2%% rule; ratios are `%s` over the reference).\n\n",
		cand, 100*TargetMargin, strings.Join(TargetReferences, " and "), cand)
	b.WriteString("| profile | winner | " + cand + " / best | best or tied |")
	for _, r := range ts[0].Refs {
		fmt.Fprintf(b, " p95 / %s | p99 / %s |", r.Arm, r.Arm)
	}
	b.WriteString(" 2% rule |\n|---|---|---|---|" + strings.Repeat("---|---|", len(ts[0].Refs)) + "---|\n")
	tied, met := 0, 0
	for _, t := range ts {
		fmt.Fprintf(b, "| %s | %s | %s | %s |", t.Profile, t.Winner, ratio(t.Ratio), yesNo(t.BestOrTied(), t.Verdict))
		for _, r := range t.Refs {
			fmt.Fprintf(b, " %s | %s |", marked(r.P95), marked(r.P99))
		}
		fmt.Fprintf(b, " %s |\n", yesNo(t.MarginMet(), ""))
		if t.BestOrTied() {
			tied++
		}
		if t.MarginMet() {
			met++
		}
	}
	fmt.Fprintf(b, "\n`%s` is best or tied on %d of %d profiles and meets the 2%% rule on %d of %d.\n\n", cand, tied, len(ts), met, len(ts))
}

// marked is a ratio to 3 decimals, in bold when it breaks the 2% rule.
func marked(x float64) string {
	s := num(x, 3)
	if x > 1+TargetMargin || math.IsNaN(x) {
		return "**" + s + "**"
	}
	return s
}

func yesNo(ok bool, why string) string {
	s := "no"
	if ok {
		s = "yes"
	}
	if why != "" {
		s += " (" + why + ")"
	}
	return s
}
