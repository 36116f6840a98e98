package analysis

import (
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/loadaware/loadaware-epp/bench/experiment"
)

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
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "inf"
	case name == "req/s" || name == "e2e p95":
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
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
