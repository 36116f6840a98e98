package analysis

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
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
		var buf bytes.Buffer
		if err := WriteCSV(&buf, run.Rows); err != nil {
			return Analysis{}, err
		}
		if err := writeFile(filepath.Join(armDir, fmt.Sprintf("seed-%02d.csv", run.Seed)), buf.Bytes()); err != nil {
			return Analysis{}, err
		}
	}
	var buf bytes.Buffer
	if err := a.WriteSeedsCSV(&buf); err != nil {
		return Analysis{}, err
	}
	if err := writeFile(filepath.Join(dir, "seeds.csv"), buf.Bytes()); err != nil {
		return Analysis{}, err
	}
	figs, err := Figures(filepath.Join(dir, "figures"), res, a)
	if err != nil {
		return Analysis{}, err
	}
	buf.Reset()
	if err := a.WriteMarkdown(&buf, res, opts, figs); err != nil {
		return Analysis{}, err
	}
	if err := writeFile(filepath.Join(dir, "REPORT.md"), buf.Bytes()); err != nil {
		return Analysis{}, err
	}
	return a, nil
}

func writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o644); err != nil {
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

func num(x float64, prec int) string {
	switch {
	case math.IsNaN(x):
		return "NaN"
	case math.IsInf(x, 1):
		return "Inf"
	}
	return fmt.Sprintf("%.*f", prec, x)
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

func cell(metric string, v float64) string {
	switch metric {
	case "req/s", "e2e p95":
		return num(v, 2)
	}
	return num(v, 3)
}

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
