package analysis

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// ReportOptions describe how the sweep was produced, for the report's
// reproduction section.
type ReportOptions struct {
	Command  string        // the command line that produced the sweep
	WallTime time.Duration // wall time of the sweep; 0 leaves it out
	Workers  int           // parallel runs used
	NoCSVs   bool          // skip runs/<arm>/seed-<n>.csv (about 200 kB per run)
}

// WriteReport analyses res and writes, under dir (created if needed):
// runs/<arm>/seed-<n>.csv (the per-request CSV), seeds.csv (per-seed
// metrics), figures/*.png and REPORT.md (tables, figures, verdict). With
// opts.NoCSVs the per-request CSVs are left out.
func WriteReport(dir string, res experiment.Results, opts ReportOptions) (Analysis, error) {
	a, err := Analyze(res)
	if err != nil {
		return Analysis{}, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "figures"), 0o755); err != nil {
		return Analysis{}, fmt.Errorf("analysis: create %s: %w", dir, err)
	}
	for _, run := range res.Runs {
		if opts.NoCSVs {
			break
		}
		armDir := filepath.Join(dir, "runs", run.Arm.Name)
		if err := os.MkdirAll(armDir, 0o755); err != nil {
			return Analysis{}, fmt.Errorf("analysis: %w", err)
		}
		if err := writeWith(filepath.Join(armDir, fmt.Sprintf("seed-%02d.csv", run.Seed)), func(w io.Writer) error { return WriteCSV(w, run.Rows) }); err != nil {
			return Analysis{}, err
		}
	}
	if err := writeWith(filepath.Join(dir, "seeds.csv"), a.WriteSeedsCSV); err != nil {
		return Analysis{}, err
	}
	figs, err := Figures(filepath.Join(dir, "figures"), res, a)
	if err != nil {
		return Analysis{}, err
	}
	return a, writeWith(filepath.Join(dir, "REPORT.md"), func(w io.Writer) error { return a.WriteMarkdown(w, res, opts, figs) })
}

// writeWith writes what fill writes to the file at path; nothing when fill fails.
func writeWith(path string, fill func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := fill(&buf); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("analysis: write %s: %w", path, err)
	}
	return nil
}

// WriteSeedsCSV writes one line per run with its metrics.
func (a Analysis) WriteSeedsCSV(w io.Writer) error {
	cols := []string{"arm", "seed", "requests", "errors"}
	for _, m := range Metrics {
		cols = append(cols, m.Name)
	}
	cols = append(cols, "ttft_mean", "itl_p50", "e2e_p50", "tok/s", "preemptions")
	if _, err := fmt.Fprintln(w, strings.Join(cols, ",")); err != nil {
		return err
	}
	for _, s := range a.Seeds {
		vals := []string{s.Arm, fmt.Sprint(s.Seed), fmt.Sprint(s.Requests), fmt.Sprint(s.Errors)}
		for _, m := range Metrics {
			vals = append(vals, num(m.Value(s), 6))
		}
		vals = append(vals, num(s.TTFT.Mean, 6), num(s.ITL.P50, 6), num(s.E2E.P50, 6), num(s.TokPerSec, 3), fmt.Sprint(s.Preemptions))
		if _, err := fmt.Fprintln(w, strings.Join(vals, ",")); err != nil {
			return err
		}
	}
	return nil
}

// num formats x with prec decimals, NaN and +Inf as the CSVs spell them.
func num(x float64, prec int) string { return formatNum(x, prec, "NaN", "Inf") }

// formatNum formats x with prec decimals, NaN as nan and +Inf as inf.
func formatNum(x float64, prec int, nan, inf string) string {
	switch {
	case math.IsNaN(x):
		return nan
	case math.IsInf(x, 1):
		return inf
	}
	return fmt.Sprintf("%.*f", prec, x)
}

// metricDecimals is the decimals the report's tables give a metric.
func metricDecimals(metric string) int {
	if metric == "req/s" || metric == "e2e p95" {
		return 2
	}
	return 3
}

// fmtP formats a p-value.
func fmtP(p float64) string {
	if p < 0.0001 {
		return "< 0.0001"
	}
	return fmt.Sprintf("%.4f", p)
}

// WriteResultsTable writes the medians of every arm, with the published row
// under each arm that has one.
func (a Analysis) WriteResultsTable(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| arm | source |")
	sep := "|---|---|"
	for _, m := range Metrics {
		b.WriteString(" " + m.Name + " |")
		sep += "---|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, s := range a.Arms {
		fmt.Fprintf(&b, "| %s | simulated (%d seeds) |", s.Arm.Name, s.Seeds)
		for _, m := range Metrics {
			b.WriteString(" " + cell(m.Name, s.Median[m.Name]) + " |")
		}
		b.WriteString("\n")
		if p, ok := PublishedFor(s.Arm.Name); ok {
			fmt.Fprintf(&b, "| %s | published |", s.Arm.Name)
			for _, m := range Metrics {
				if v, ok := p.value(m.Name); ok {
					b.WriteString(" " + cell(m.Name, v) + " |")
				} else {
					b.WriteString(" |")
				}
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cell(metric string, v float64) string { return num(v, metricDecimals(metric)) }

// WriteComparisonTable writes every paired comparison with the baseline.
func (a Analysis) WriteComparisonTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "| arm vs %s | metric | seeds improved | median reduction | 95%% CI | W+ | one-sided p | significant (p < %.3f) |\n", Baseline, Alpha)
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, c := range a.Comparisons {
		sig := "no (null result)"
		if c.Significant(Alpha) {
			sig = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %d of %d | %+.1f%% | [%+.1f%%, %+.1f%%] | %g | %s | %s |\n",
			c.Arm, c.Metric, c.Improved, c.Seeds, 100*c.Reduction, 100*c.CI.Lo, 100*c.CI.Hi, c.Test.WPlus, fmtP(c.Test.P), sig)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCalibrationTable writes the tolerance checks and the orderings.
func (a Analysis) WriteCalibrationTable(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| arm | metric | simulated | published | tolerance | error | holds |\n|---|---|---|---|---|---|---|\n")
	for _, c := range a.Calibration {
		tol, errText := fmt.Sprintf("± %.2f", c.Tol), fmt.Sprintf("%+.3f", c.Got-c.Want)
		if c.Relative {
			tol, errText = fmt.Sprintf("± %.0f%%", 100*c.Tol), fmt.Sprintf("%+.1f%%", 100*c.RelativeError)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", c.Arm, c.Metric, cell(c.Metric, c.Got), cell(c.Metric, c.Want), tol, errText, yesNo(c.Pass))
	}
	b.WriteString("\n| ordering on | published (ascending) | simulated (ascending) | discordant pairs | holds |\n|---|---|---|---|---|\n")
	for _, o := range a.Orderings {
		fmt.Fprintf(&b, "| %s | %s | %s | %d of %d | %s |\n", o.Metric, strings.Join(o.Published, " < "), strings.Join(o.Simulated, " < "), o.Discordant, o.Pairs, yesNo(o.Pass))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// WriteAll writes dir's report (WriteReport: REPORT.md, figures, seeds.csv and the
// per-request CSVs), adds the live sections when meta.Mode is experiment.ModeLive and, with
// save, saves the runs in dir/experiment.FileName (experiment.Save).
func WriteAll(dir string, res experiment.Results, meta experiment.Meta, save bool) (Analysis, error) {
	a, err := WriteReport(dir, res, ReportOptions{Command: meta.Command, WallTime: meta.Wall, Workers: meta.Workers, NoCSVs: meta.NoCSVs})
	if err != nil {
		return a, err
	}
	if meta.Mode == experiment.ModeLive {
		if err := amendLiveReport(filepath.Join(dir, "REPORT.md"), res, meta); err != nil {
			return a, err
		}
	}
	if !save {
		return a, nil
	}
	return a, experiment.Save(dir, res, meta)
}

// amendLiveReport retitles REPORT.md for a live run, says what ran live, and adds the
// per-seed comparison with virtual time.
func amendLiveReport(path string, res experiment.Results, meta experiment.Meta) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	title, body, _ := strings.Cut(string(raw), "\n")
	if !strings.HasPrefix(title, "# ") {
		return fmt.Errorf("%s does not start with a title line", path)
	}
	var msgs, recv int64
	var warm int
	for _, l := range meta.Live {
		msgs, recv, warm = msgs+l.Messages, recv+l.Received, warm+l.WarmEvents
	}
	var b strings.Builder
	b.WriteString("# Benchmark report: the published experiment, live\n\n")
	fmt.Fprintf(&b, "**Live mode** (`bench/live`): every engine was a real HTTP server (OpenAI streaming, vLLM `/metrics`) running the `bench/sim` model against the wall clock on its own loopback IP; every request went from the client through `bench/gateway` and the real ext_proc server (`app.Start`); the engines' LMCache tiers pushed %d messages over ZeroMQ to the embedded controller, which received %d. Running counts were scraped from the engines' `/metrics`. Each seed started from its virtual-time warm-up (%d chunk events applied to the index directly). Latencies include the real HTTP, gRPC and scheduling overheads of this machine.\n", msgs, recv, warm)
	b.WriteString(body)
	if len(meta.Reference) > 0 {
		b.WriteString("\n## Live against virtual time (same arms, seeds and warm-up)\n\n")
		b.WriteString("The same seeds through the same picker code in virtual time (`vtime.RunOne`); each live row is followed by its virtual-time twin.\n\n")
		writeTwinTable(&b, res.Runs, meta.Reference, meta.Live)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// writeTwinTable writes one line per live run and one per virtual-time twin.
func writeTwinTable(w io.Writer, live, ref []experiment.Run, info []experiment.LiveInfo) {
	cols := []string{"TTFT p50", "TTFT p95", "TTFT p99", "ITL p95", "e2e p95", "req/s", "imbalance", "hit rate", "miss@150ms"}
	fmt.Fprintf(w, "| arm | seed | mode | %s | errors | wall s |\n|---|---|---|%s---|---|\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	eachTwin(live, ref, func(r experiment.Run, mode string, i int) {
		wall := ""
		if i >= 0 && i < len(info) {
			wall = fmt.Sprintf("%.1f", info[i].WallSeconds)
		}
		cells, errs := metricCells(r, cols)
		fmt.Fprintf(w, "| %s | %d | %s | %s | %d | %s |\n", r.Arm.Name, r.Seed, mode, strings.Join(cells, " | "), errs, wall)
	})
}

// eachTwin calls f for each live run (mode "live", i its index) and after it for each of
// its virtual-time twins in ref (mode "virtual time", i -1).
func eachTwin(live, ref []experiment.Run, f func(r experiment.Run, mode string, i int)) {
	for i, r := range live {
		f(r, "live", i)
		for _, t := range ref {
			if t.Arm.Name == r.Arm.Name && t.Seed == r.Seed {
				f(t, "virtual time", -1)
			}
		}
	}
}

// metricCells returns r's values of the metrics cols, formatted, and its errors.
func metricCells(r experiment.Run, cols []string) ([]string, int) {
	m := SeedMetricsOf(r)
	out := make([]string, len(cols))
	for i, c := range cols {
		met, _ := MetricByName(c)
		out[i] = FormatMetric(c, met.Value(m))
	}
	return out, m.Errors
}

// FormatMetric formats a metric value as the report's tables do.
func FormatMetric(name string, v float64) string {
	return formatNum(v, metricDecimals(name), "-", "inf")
}

// WriteTwinsText writes, as an aligned text table, each live run's metrics, with its
// virtual-time twin when there is one.
func WriteTwinsText(w io.Writer, runs []experiment.Run, meta experiment.Meta) {
	cols := []string{"TTFT p50", "TTFT p95", "TTFT p99", "ITL p95", "e2e p95", "req/s", "imbalance", "hit rate"}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "arm\tseed\tmode\t%s\terrors\tLMCache msgs pushed/received\twall s\t\n", strings.Join(cols, "\t"))
	eachTwin(runs, meta.Reference, func(r experiment.Run, mode string, i int) {
		extra := "\t"
		if i >= 0 && i < len(meta.Live) {
			l := meta.Live[i]
			extra = fmt.Sprintf("%d/%d\t%.1f", l.Messages, l.Received, l.WallSeconds)
		}
		cells, errs := metricCells(r, cols)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t\n", r.Arm.Name, r.Seed, mode, strings.Join(cells, "\t"), errs, extra)
	})
	_ = tw.Flush()
}

// AppendEnvoySection analyses res, the same sweep as a report's behind Envoy and this
// picker (experiment.EnvoyRouter), and appends its tables to the report at path.
func AppendEnvoySection(path string, res experiment.Results) error {
	a, err := Analyze(res)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("\n## The same fleet behind Envoy and this picker\n\n")
	b.WriteString("The same engines, workload, protocol and seeds, with `experiment.EnvoyRouter()` in front instead of the published Python router: ")
	b.WriteString("every decision sees every earlier booking at once (no shared statistics snapshot), and the data path adds 1 ms each way instead of the Python router's 48 ms on the first token. ")
	b.WriteString("The warm-up then alternates prompts one by one between the engines instead of in batches of four, so kvaware's busy engine gets a smaller share.\n\n")
	if err := a.WriteResultsTable(&b); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nPaired comparisons with %s (behind Envoy):\n\n", Baseline)
	if err := a.WriteComparisonTable(&b); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(f, b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// CSVHeader is the published per-request CSV's header.
var CSVHeader = []string{"index", "prefix_id", "send_ts", "ttft_s", "e2e_s", "prompt_tokens", "completion_tokens", "status", "error", "itls_ms"}

// WriteCSV writes one run's requests in the published per-request format:
// times in seconds with microsecond precision, itls_ms as a ';'-separated list
// of milliseconds, empty cells for values a failed request does not have.
func WriteCSV(w io.Writer, rows []experiment.Row) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, r := range rows {
		itls := make([]string, len(r.ITLs))
		for i, g := range r.ITLs {
			itls[i] = strconv.FormatFloat(g, 'f', 3, 64)
		}
		rec := []string{
			strconv.Itoa(r.Index),
			strconv.Itoa(r.PrefixID),
			secs(r.SendAt),
			secs(r.TTFT),
			secs(r.E2E),
			strconv.Itoa(r.PromptTokens),
			strconv.Itoa(r.CompletionTokens),
			r.Status,
			r.Error,
			strings.Join(itls, ";"),
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func secs(x float64) string {
	if !stats.Finite(x) {
		return ""
	}
	return strconv.FormatFloat(x, 'f', 6, 64)
}
