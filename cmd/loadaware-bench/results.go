package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/analysis"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

// resultsFile is the file under a results directory that holds every run (rows, samples,
// engine counters) so compare and report need no rerun.
const resultsFile = "results.json.gz"

// resultsFormat is the version of resultsFile's layout.
const resultsFormat = 1

const (
	modeVirtual = "virtual-time"
	modeLive    = "live"
)

// liveInfo is what a live run adds to its vtime.Run.
type liveInfo struct {
	Messages      int64   `json:"lmcache_messages_pushed"`
	Received      int64   `json:"lmcache_messages_received"`
	WarmEvents    int     `json:"warmup_events_applied"`
	InFlightAfter float64 `json:"inflight_after"`
	WallSeconds   float64 `json:"wall_seconds"`
}

// savedResults is resultsFile's content.
type savedResults struct {
	Format  int               `json:"format"`
	Mode    string            `json:"mode"`
	Command string            `json:"command"`
	Wall    time.Duration     `json:"wall_ns"`
	Workers int               `json:"workers"`
	NoCSVs  bool              `json:"no_csvs"`
	Config  vtime.SweepConfig `json:"config"`
	Runs    []savedRun        `json:"runs"`
	// Live mode: what each run adds, and the same arms and seeds in virtual time.
	Live      []liveInfo `json:"live,omitempty"`
	Reference []savedRun `json:"virtual_time_reference,omitempty"`
}

type savedRun struct {
	Arm      vtime.Arm           `json:"arm"`
	Seed     uint64              `json:"seed"`
	Interval time.Duration       `json:"sample_interval_ns"`
	Running  [][]int             `json:"running"`
	Window   float64             `json:"window_s"`
	Span     float64             `json:"span_s"`
	Engines  []vtime.EngineStats `json:"engines"`
	Rows     []savedRow          `json:"rows"`
}

// savedRow is a vtime.Row with NaN as null and the gaps between tokens in whole
// nanoseconds, from which the milliseconds are recovered exactly.
type savedRow struct {
	Index            int      `json:"i"`
	PrefixID         int      `json:"prefix"`
	SendAt           float64  `json:"send_s"`
	TTFT             *float64 `json:"ttft_s"`
	E2E              *float64 `json:"e2e_s"`
	PromptTokens     int      `json:"prompt_tokens"`
	CompletionTokens int      `json:"completion_tokens"`
	Status           string   `json:"status"`
	Error            string   `json:"error,omitempty"`
	ITLs             []int64  `json:"itls_ns"`
	Engine           string   `json:"engine"`
	CachedTokens     int      `json:"cached_tokens,omitempty"`
	LoadedTokens     int      `json:"loaded_tokens,omitempty"`
	Preemptions      int      `json:"preemptions,omitempty"`
}

// runMeta says how results were produced.
type runMeta struct {
	Mode      string
	Command   string
	Wall      time.Duration
	Workers   int
	NoCSVs    bool
	NoSave    bool        // do not write resultsFile
	Live      []liveInfo  // live mode: one per run
	Reference []vtime.Run // live mode: the same arms and seeds in virtual time
}

func nullable(x float64) *float64 {
	if math.IsNaN(x) {
		return nil
	}
	return &x
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func toSaved(r vtime.Run) savedRun {
	s := savedRun{Arm: r.Arm, Seed: r.Seed, Interval: r.Interval, Running: r.Running, Window: r.Window, Span: r.Span, Engines: r.Engines}
	for _, row := range r.Rows {
		var itls []int64 // nil stays nil (null)
		if row.ITLs != nil {
			itls = make([]int64, len(row.ITLs))
			for i, ms := range row.ITLs {
				itls[i] = int64(math.Round(ms * 1e6))
			}
		}
		s.Rows = append(s.Rows, savedRow{Index: row.Index, PrefixID: row.PrefixID, SendAt: row.SendAt, TTFT: nullable(row.TTFT), E2E: nullable(row.E2E),
			PromptTokens: row.PromptTokens, CompletionTokens: row.CompletionTokens, Status: row.Status, Error: row.Error, ITLs: itls,
			Engine: row.Engine, CachedTokens: row.CachedTokens, LoadedTokens: row.LoadedTokens, Preemptions: row.Preemptions})
	}
	return s
}

func fromSaved(s savedRun) vtime.Run {
	r := vtime.Run{Arm: s.Arm, Seed: s.Seed, Interval: s.Interval, Running: s.Running, Window: s.Window, Span: s.Span, Engines: s.Engines}
	for _, row := range s.Rows {
		var itls []float64
		if row.ITLs != nil {
			itls = make([]float64, len(row.ITLs))
			for i, ns := range row.ITLs {
				itls[i] = float64(ns) / 1e6
			}
		}
		r.Rows = append(r.Rows, vtime.Row{Index: row.Index, PrefixID: row.PrefixID, SendAt: row.SendAt, TTFT: orNaN(row.TTFT), E2E: orNaN(row.E2E),
			PromptTokens: row.PromptTokens, CompletionTokens: row.CompletionTokens, Status: row.Status, Error: row.Error, ITLs: itls,
			Engine: row.Engine, CachedTokens: row.CachedTokens, LoadedTokens: row.LoadedTokens, Preemptions: row.Preemptions})
	}
	return r
}

// saveResults writes res and meta to dir/resultsFile.
func saveResults(dir string, res vtime.Results, meta runMeta) error {
	s := savedResults{Format: resultsFormat, Mode: meta.Mode, Command: meta.Command, Wall: meta.Wall,
		Workers: meta.Workers, NoCSVs: meta.NoCSVs, Config: res.Config, Live: meta.Live}
	for _, r := range res.Runs {
		s.Runs = append(s.Runs, toSaved(r))
	}
	for _, r := range meta.Reference {
		s.Reference = append(s.Reference, toSaved(r))
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(zw).Encode(s); err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	path := filepath.Join(dir, resultsFile)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// loadResults reads dir/resultsFile.
func loadResults(dir string) (vtime.Results, runMeta, error) {
	path := filepath.Join(dir, resultsFile)
	f, err := os.Open(path)
	if err != nil {
		return vtime.Results{}, runMeta{}, fmt.Errorf("%w: run `loadaware-bench sweep -out %s` (or live) first", err, dir)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return vtime.Results{}, runMeta{}, fmt.Errorf("%s is not gzip: %w", path, err)
	}
	var s savedResults
	if err := json.NewDecoder(zr).Decode(&s); err != nil {
		return vtime.Results{}, runMeta{}, fmt.Errorf("read %s: %w", path, err)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return vtime.Results{}, runMeta{}, fmt.Errorf("read %s: %w", path, err)
	}
	if s.Format != resultsFormat {
		return vtime.Results{}, runMeta{}, fmt.Errorf("%s has format %d; this loadaware-bench reads format %d: rerun the sweep", path, s.Format, resultsFormat)
	}
	if len(s.Runs) == 0 {
		return vtime.Results{}, runMeta{}, fmt.Errorf("%s holds no runs", path)
	}
	res := vtime.Results{Config: s.Config}
	for _, r := range s.Runs {
		res.Runs = append(res.Runs, fromSaved(r))
	}
	meta := runMeta{Mode: s.Mode, Command: s.Command, Wall: s.Wall, Workers: s.Workers, NoCSVs: s.NoCSVs, Live: s.Live}
	for _, r := range s.Reference {
		meta.Reference = append(meta.Reference, fromSaved(r))
	}
	return res, meta, nil
}

// writeResults writes the report (analysis.WriteReport: REPORT.md, figures, seeds.csv and
// per-request CSVs), adds the live sections in live mode, and saves the runs.
func writeResults(dir string, res vtime.Results, meta runMeta) (analysis.Analysis, error) {
	a, err := analysis.WriteReport(dir, res, analysis.ReportOptions{Command: meta.Command, WallTime: meta.Wall, Workers: meta.Workers, NoCSVs: meta.NoCSVs})
	if err != nil {
		return a, err
	}
	if meta.Mode == modeLive {
		if err := amendLiveReport(filepath.Join(dir, "REPORT.md"), res, meta); err != nil {
			return a, err
		}
	}
	if meta.NoSave {
		return a, nil
	}
	return a, saveResults(dir, res, meta)
}

// amendLiveReport retitles REPORT.md for a live run, says what ran live, and adds the
// per-seed comparison with virtual time.
func amendLiveReport(path string, res vtime.Results, meta runMeta) error {
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
func writeTwinTable(w io.Writer, live, ref []vtime.Run, info []liveInfo) {
	cols := []string{"TTFT p50", "TTFT p95", "TTFT p99", "ITL p95", "e2e p95", "req/s", "imbalance", "hit rate", "miss@150ms"}
	fmt.Fprintf(w, "| arm | seed | mode | %s | errors | wall s |\n|---|---|---|%s---|---|\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	line := func(r vtime.Run, mode, wall string) {
		m := analysis.SeedMetricsOf(r)
		fmt.Fprintf(w, "| %s | %d | %s |", r.Arm.Name, r.Seed, mode)
		for _, c := range cols {
			met, _ := analysis.MetricByName(c)
			fmt.Fprintf(w, " %s |", fmtMetric(c, met.Value(m)))
		}
		fmt.Fprintf(w, " %d | %s |\n", m.Errors, wall)
	}
	for i, r := range live {
		wall := ""
		if i < len(info) {
			wall = fmt.Sprintf("%.1f", info[i].WallSeconds)
		}
		line(r, "live", wall)
		for _, t := range ref {
			if t.Arm.Name == r.Arm.Name && t.Seed == r.Seed {
				line(t, "virtual time", "")
			}
		}
	}
}

// fmtMetric formats a metric value as the report's tables do.
func fmtMetric(name string, v float64) string {
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

// errNoRuns is returned when an arm has no runs in a results directory.
var errNoRuns = errors.New("no runs")
