package experiment

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"
)

// FileName is the file under a results directory that holds every run (rows, samples,
// engine counters) so compare and report need no rerun.
const FileName = "results.json.gz"

// fileFormat is the version of FileName's layout.
const fileFormat = 1

// The modes a results file records: which driver produced its runs.
const (
	ModeVirtual = "virtual-time" // bench/vtime
	ModeLive    = "live"         // bench/live
)

// LiveInfo is what a live run adds to its Run.
type LiveInfo struct {
	Messages      int64   `json:"lmcache_messages_pushed"`
	Received      int64   `json:"lmcache_messages_received"`
	WarmEvents    int     `json:"warmup_events_applied"`
	InFlightAfter float64 `json:"inflight_after"`
	WallSeconds   float64 `json:"wall_seconds"`
}

// savedResults is FileName's content.
type savedResults struct {
	Format  int           `json:"format"`
	Mode    string        `json:"mode"`
	Command string        `json:"command"`
	Wall    time.Duration `json:"wall_ns"`
	Workers int           `json:"workers"`
	NoCSVs  bool          `json:"no_csvs"`
	Config  Config        `json:"config"`
	Runs    []savedRun    `json:"runs"`
	// Live mode: what each run adds, and the same arms and seeds in virtual time.
	Live      []LiveInfo `json:"live,omitempty"`
	Reference []savedRun `json:"virtual_time_reference,omitempty"`
}

type savedRun struct {
	Arm      Arm           `json:"arm"`
	Seed     uint64        `json:"seed"`
	Interval time.Duration `json:"sample_interval_ns"`
	Running  [][]int       `json:"running"`
	Window   float64       `json:"window_s"`
	Span     float64       `json:"span_s"`
	Engines  []EngineStats `json:"engines"`
	Rows     []savedRow    `json:"rows"`
}

// savedRow is a Row with NaN as null and the gaps between tokens in whole
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

// Meta says how results were produced.
type Meta struct {
	Mode      string        // ModeVirtual or ModeLive
	Command   string        // the command line that produced the runs
	Wall      time.Duration // their wall time
	Workers   int           // runs in parallel
	NoCSVs    bool          // the per-request CSVs were not written
	Live      []LiveInfo    // live mode: one per run
	Reference []Run         // live mode: the same arms and seeds in virtual time
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

func toSaved(r Run) savedRun {
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

func fromSaved(s savedRun) Run {
	r := Run{Arm: s.Arm, Seed: s.Seed, Interval: s.Interval, Running: s.Running, Window: s.Window, Span: s.Span, Engines: s.Engines}
	for _, row := range s.Rows {
		var itls []float64
		if row.ITLs != nil {
			itls = make([]float64, len(row.ITLs))
			for i, ns := range row.ITLs {
				itls[i] = float64(ns) / 1e6
			}
		}
		r.Rows = append(r.Rows, Row{Index: row.Index, PrefixID: row.PrefixID, SendAt: row.SendAt, TTFT: orNaN(row.TTFT), E2E: orNaN(row.E2E),
			PromptTokens: row.PromptTokens, CompletionTokens: row.CompletionTokens, Status: row.Status, Error: row.Error, ITLs: itls,
			Engine: row.Engine, CachedTokens: row.CachedTokens, LoadedTokens: row.LoadedTokens, Preemptions: row.Preemptions})
	}
	return r
}

// Save writes res and meta to dir/FileName.
func Save(dir string, res Results, meta Meta) error {
	s := savedResults{Format: fileFormat, Mode: meta.Mode, Command: meta.Command, Wall: meta.Wall,
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
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// Load reads dir/FileName.
func Load(dir string) (Results, Meta, error) {
	path := filepath.Join(dir, FileName)
	f, err := os.Open(path)
	if err != nil {
		return Results{}, Meta{}, fmt.Errorf("%w: run `loadaware-bench sweep -out %s` (or live) first", err, dir)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return Results{}, Meta{}, fmt.Errorf("%s is not gzip: %w", path, err)
	}
	var s savedResults
	if err := json.NewDecoder(zr).Decode(&s); err != nil {
		return Results{}, Meta{}, fmt.Errorf("read %s: %w", path, err)
	}
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return Results{}, Meta{}, fmt.Errorf("read %s: %w", path, err)
	}
	if s.Format != fileFormat {
		return Results{}, Meta{}, fmt.Errorf("%s has format %d; this loadaware-bench reads format %d: rerun the sweep", path, s.Format, fileFormat)
	}
	if len(s.Runs) == 0 {
		return Results{}, Meta{}, fmt.Errorf("%s holds no runs", path)
	}
	res := Results{Config: s.Config}
	for _, r := range s.Runs {
		res.Runs = append(res.Runs, fromSaved(r))
	}
	meta := Meta{Mode: s.Mode, Command: s.Command, Wall: s.Wall, Workers: s.Workers, NoCSVs: s.NoCSVs, Live: s.Live}
	for _, r := range s.Reference {
		meta.Reference = append(meta.Reference, fromSaved(r))
	}
	return res, meta, nil
}

// WriteFile creates path (and its directory) and writes it with write: every
// report, figure and JSON file a run leaves goes through it.
func WriteFile(path string, write func(io.Writer) error) error {
	if err := MkdirFor(path); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// MkdirFor creates the directory path is in.
func MkdirFor(path string) error {
	if dir := filepath.Dir(path); dir != "." {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	return nil
}
