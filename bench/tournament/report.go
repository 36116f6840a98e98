package tournament

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/plot"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// ReportOptions say what the markdown report names beside the results.
type ReportOptions struct {
	Command string // the command that produced the report, shown verbatim ("" omits it)
	Figure  string // path of the summary figure relative to the report ("" omits it)
	JSON    string // path of the JSON results relative to the report ("" omits it)
}

// columns are the per-profile table's columns: metric, header, format.
var columns = []struct {
	metric, head string
	digits       int
}{
	{capture.TTFTP50, "TTFT p50 (s)", 3},
	{capture.TTFTP95, "TTFT p95 (s)", 3},
	{capture.TTFTP99, "TTFT p99 (s)", 3},
	{capture.ITLP95, "ITL p95 (s)", 3},
	{GoodputKey, "goodput ≤150 ms (req/s)", 2},
	{capture.ReqS, "req/s", 2},
	{capture.ImbalanceKey, "imbalance", 3},
	{HitRateKey, "hit rate", 3},
	{ReuseKey, "prompt reuse", 3},
	{capture.Errors, "errors", 0},
}

// WriteMarkdown writes the report: how the tournament ran, the summary (each
// arm's median TTFT p95 relative to its profile's best, the winner marked),
// then per profile the medians over seeds of every metric and the paired
// tests of every arm against the best other arm.
func WriteMarkdown(w io.Writer, res Result, opt ReportOptions) error {
	return writeMarkdown(w, res, opt, "Policy tournament", nil, nil)
}

// writeMarkdown is WriteMarkdown under the given title, with lead's text
// (when set) after the command and extra's (when set) after the summary,
// given each profile's tests.
func writeMarkdown(w io.Writer, res Result, opt ReportOptions, title string, lead func(*bufio.Writer), extra func(*bufio.Writer, [][]Test)) error {
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "# %s\n\n", title)
	if opt.Command != "" {
		fmt.Fprintf(b, "Produced by `%s`.\n\n", opt.Command)
	}
	if lead != nil {
		lead(b)
	}
	fmt.Fprintf(b, "%d profiles x %d arms x %d seeds (%s), in virtual time through the shipped picker. ", len(res.Profiles), armCount(res), len(res.Seeds), seedText(res.Seeds))
	b.WriteString("Every arm is an ext_proc picker behind Envoy (`experiment.EnvoyRouter()`: each decision books synchronously and sees every earlier one; the data path adds 1 ms each way). ")
	b.WriteString(gieNote(res))
	b.WriteString("Each (profile, arm) cell follows the published cell protocol: a cold fleet, the published warm-up routed by the arm when the workload has a shared prefix pool, then the seeds back to back on the same engines. ")
	b.WriteString("Seed s gives every arm the same requests, so arms are compared seed by seed. ")
	fmt.Fprintf(b, "Per-seed metrics are computed by `bench/capture` from the simulated rows and engine series sampled every %v; tables show medians over seeds.\n\n", res.SampleInterval)
	if len(res.Seeds) < MinSeeds {
		fmt.Fprintf(b, "**Only %d seeds**: the statistics are stated for at least %d; treat the tests below as a smoke run.\n\n", len(res.Seeds), MinSeeds)
	}
	tests := make([][]Test, len(res.Profiles)) // each profile's tests, computed once (bootstraps)
	for j, p := range res.Profiles {
		tests[j] = p.Tests()
	}
	writeSummary(b, res, tests, opt)
	if extra != nil {
		extra(b, tests)
	}
	for j, p := range res.Profiles {
		writeProfile(b, p, tests[j])
	}
	return b.Flush()
}

// gieNote says, when the tournament runs the gie arm, that it is GIE's own
// scheduler in the picker's place, and is "" otherwise.
func gieNote(res Result) string {
	if len(res.Profiles) == 0 {
		return ""
	}
	for _, a := range res.Profiles[0].Arms {
		if a.Arm.Policy == experiment.PolicyGIE {
			return fmt.Sprintf("Arm `%s` is GIE v1.5.0's own scheduler (`bench/peers/gie`, its default profile) in the picker's place, fed each engine's metrics as scraped every 50 ms of virtual time (`docs/bench/peers.md`). ", a.Arm.Name)
		}
	}
	return ""
}

func armCount(res Result) int {
	if len(res.Profiles) == 0 {
		return 0
	}
	return len(res.Profiles[0].Arms)
}

// seedText names the seeds compactly: "seeds 1-20" or "seeds 3,7".
func seedText(seeds []uint64) string {
	if len(seeds) == 0 {
		return "no seeds"
	}
	run := true
	for i := 1; i < len(seeds); i++ {
		run = run && seeds[i] == seeds[i-1]+1
	}
	if run && len(seeds) > 2 {
		return fmt.Sprintf("seeds %d-%d", seeds[0], seeds[len(seeds)-1])
	}
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = strconv.FormatUint(s, 10)
	}
	return "seeds " + strings.Join(parts, ",")
}

// Summary is the arms x profiles table of the report: Relative[arm][profile]
// is the arm's median TTFT p95 over the profile's best arm's. Every profile
// of a Result runs the same arms in the same order.
type Summary struct {
	Arms, Profiles []string
	Relative       [][]float64
	Winner         []int // per profile, the best arm's index
}

// Summarize returns the summary of res.
func Summarize(res Result) Summary {
	s := Summary{}
	for _, p := range res.Profiles {
		s.Profiles = append(s.Profiles, p.Profile.Name)
		s.Winner = append(s.Winner, p.Best())
	}
	if len(res.Profiles) == 0 {
		return s
	}
	for _, a := range res.Profiles[0].Arms {
		s.Arms = append(s.Arms, a.Arm.Name)
	}
	s.Relative = make([][]float64, len(s.Arms))
	for i := range s.Relative {
		s.Relative[i] = make([]float64, len(res.Profiles))
	}
	for j, p := range res.Profiles {
		for i, r := range p.Relative() {
			s.Relative[i][j] = r
		}
	}
	return s
}

func writeSummary(b *bufio.Writer, res Result, tests [][]Test, opt ReportOptions) {
	s := Summarize(res)
	b.WriteString("## Summary: who wins where\n\n")
	b.WriteString("Median TTFT p95 of each arm over the profile's best arm's (1.00 = the best; **bold ★** marks the winner; ")
	b.WriteString("*tied* marks arms the paired test cannot tell from the best at p < 0.025).\n\n")
	b.WriteString("| arm |")
	for _, p := range s.Profiles {
		fmt.Fprintf(b, " %s |", p)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(s.Profiles)) + "\n")
	for i, arm := range s.Arms {
		fmt.Fprintf(b, "| %s |", arm)
		for j := range s.Profiles {
			cell := ratio(s.Relative[i][j])
			switch {
			case s.Winner[j] == i:
				cell = "**" + cell + " ★**"
			case tests[j] != nil && tests[j][i].Verdict == VerdictTied:
				cell += " *tied*"
			}
			fmt.Fprintf(b, " %s |", cell)
		}
		b.WriteString("\n")
	}
	b.WriteString("| **best TTFT p95 (s)** |")
	for j, p := range res.Profiles {
		fmt.Fprintf(b, " %s (%s) |", num(p.Arms[s.Winner[j]].Median(RankMetric), 3), p.Arms[s.Winner[j]].Arm.Name)
	}
	b.WriteString("\n\n")
	if opt.Figure != "" {
		fmt.Fprintf(b, "![TTFT p95 relative to each profile's best, arms x profiles](%s)\n\n", opt.Figure)
	}
	if opt.JSON != "" {
		fmt.Fprintf(b, "Every seed's metrics, per profile and arm: [`%s`](%s).\n\n", opt.JSON, opt.JSON)
	}
}

func writeProfile(b *bufio.Writer, p ProfileResult, tests []Test) {
	fmt.Fprintf(b, "## %s\n\n%s.\n\n%s\n\n", p.Profile.Name, capitalize(p.Profile.About), FleetText(p.Profile))
	b.WriteString("| arm |")
	for _, c := range columns {
		fmt.Fprintf(b, " %s |", c.head)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(columns)) + "\n")
	best := p.Best()
	for i, a := range p.Arms {
		name := a.Arm.Name
		if i == best {
			name = "**" + name + " ★**"
		}
		fmt.Fprintf(b, "| %s |", name)
		for _, c := range columns {
			fmt.Fprintf(b, " %s |", num(a.Median(c.metric), c.digits))
		}
		b.WriteString("\n")
	}
	if tests == nil {
		b.WriteString("\n")
		return
	}
	b.WriteString("\nPaired tests on per-seed TTFT p95 against the best other arm (one-sided exact Wilcoxon signed-rank; reduction = median of (other - arm)/other over seeds, 95% bootstrap interval):\n\n")
	b.WriteString("| arm | against | seeds lower | median reduction [95% CI] | p (arm lower) | p (arm higher) | verdict |\n|---|---|---|---|---|---|---|\n")
	for _, t := range tests {
		verdict := t.Verdict
		if t.Note != "" {
			verdict += " (" + t.Note + ")"
		}
		fmt.Fprintf(b, "| %s | %s | %d/%d | %s [%s, %s] | %s | %s | %s |\n", t.Arm, t.Against, t.Improved, t.Seeds,
			pct(t.Reduction), pct(t.CILo), pct(t.CIHi), pval(t.PBetter), pval(t.PWorse), verdict)
	}
	b.WriteString("\n")
}

// FleetText describes a profile's fleet and workload in one line.
func FleetText(p Profile) string {
	f, wl := p.Fleet, p.Fleet.Workload
	speeds := make([]string, f.Engines)
	for i := range speeds {
		speeds[i] = strconv.FormatFloat(f.EngineConfig(i).Slowdown, 'g', -1, 64)
	}
	e := f.Engine
	fleet := fmt.Sprintf("Fleet: %d engines (step-time factors %s), GPU KV pool %d tokens, CPU tier %s", f.Engines, strings.Join(speeds, ", "), e.KVPoolTokens, cpuText(e.CPUTierBytes))
	var load string
	switch {
	case p.Trace != nil:
		load = traceText(p.Trace)
	case p.Replayed:
		load = fmt.Sprintf("the measured seeds' first %d requests (about %g req/s), %d-token prefixes", wl.Requests, wl.Rate, wl.PrefixTokens)
	case wl.Profile == workload.ProfileNovel:
		load = fmt.Sprintf("%d requests per seed at %g req/s, every prompt unique (%d + %d tokens)", wl.Requests, wl.Rate, wl.NovelPrefixTokens, wl.NovelSuffixTokens)
	case wl.Profile == workload.ProfileGroups:
		load = fmt.Sprintf("%d requests per seed at %g req/s, %d groups x %d prompts (a %s-token system prompt and a %d-token question each), sent in turn",
			wl.Requests, wl.Rate, wl.Prefixes, wl.PromptsPerGroup, prefixText(wl), wl.SuffixTokens)
	case wl.Profile == workload.ProfileChat:
		load = fmt.Sprintf("%d requests per seed at %g req/s in sessions of %d turns %v apart (open loop), system prompts from %d prefixes of %s tokens (Zipf %g), %d-token user messages",
			wl.Requests, wl.Rate, wl.Turns, wl.ThinkTime, wl.Prefixes, prefixText(wl), wl.ZipfS, wl.UserTokens)
	case wl.Profile == workload.ProfileConversations:
		load = fmt.Sprintf("%d requests per seed at %g req/s from %d conversations (open loop; shared system prompts: %d of %s tokens), dynamic system prompt %s tokens, turns %s, input %s tokens, answers %s tokens, tool latency %s s, cut to a %d-token context",
			wl.Requests, wl.Rate, wl.Conversations, wl.Prefixes, prefixText(wl), wl.SystemTokens, wl.TurnCount, wl.InputTokens, wl.OutputTokens, wl.ToolLatency, wl.Context)
	default:
		load = fmt.Sprintf("%d requests per seed at %g req/s, %d prefixes of %s tokens (Zipf %g)", wl.Requests, wl.Rate, wl.Prefixes, prefixText(wl), wl.ZipfS)
	}
	if wl.BurstEvery > 0 {
		load += fmt.Sprintf(", bursts of %v at %gx the base rate every %v", wl.BurstLen, wl.BurstFactor, wl.BurstEvery)
	}
	switch {
	case p.Trace != nil:
		return fmt.Sprintf("%s. Workload: %s, the trace's output tokens.", fleet, load)
	case wl.Profile == workload.ProfileConversations:
		return fmt.Sprintf("%s. Workload: %s.", fleet, load)
	}
	return fmt.Sprintf("%s. Workload: %s, %d output tokens.", fleet, load, wl.MaxTokens)
}

func prefixText(wl workload.Config) string {
	if wl.PrefixTokensMax > wl.PrefixTokens {
		return fmt.Sprintf("%d-%d", wl.PrefixTokens, wl.PrefixTokensMax)
	}
	return strconv.Itoa(wl.PrefixTokens)
}

func cpuText(b int64) string {
	if b == 0 {
		return "none"
	}
	return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func num(x float64, digits int) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case math.IsInf(x, 1):
		return "∞"
	}
	return strconv.FormatFloat(x, 'f', digits, 64)
}

func ratio(x float64) string { return num(x, 2) }

func pct(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%+.1f%%", 100*x)
}

func pval(p float64) string {
	switch {
	case math.IsNaN(p):
		return "–"
	case p < 1e-4:
		return "<0.0001"
	}
	return strconv.FormatFloat(p, 'f', 4, 64)
}

// FigureMax is the relative TTFT p95 at which the summary figure's colour
// saturates: 1.5 times the best and worse look alike (the differences that
// matter between good arms are 2-20%).
const FigureMax = 1.5

// Figure returns the summary as a heat map for bench/plot: arms as rows,
// profiles as columns, each cell the arm's median TTFT p95 over the
// profile's best ("1.00 best" for the winner: the figure's font has no star).
func (s Summary) Figure() plot.Grid {
	g := plot.Grid{Rows: s.Arms, Cols: s.Profiles, Min: 1, Max: FigureMax}
	for i := range s.Arms {
		vals := make([]float64, len(s.Profiles))
		labels := make([]string, len(s.Profiles))
		for j := range s.Profiles {
			vals[j] = s.Relative[i][j]
			labels[j] = ratio(vals[j])
			if s.Winner[j] == i {
				labels[j] += " best"
			}
		}
		g.Values, g.Labels = append(g.Values, vals), append(g.Labels, labels)
	}
	return g
}
