package capture

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Compact is what the project carries instead of a full measurement
// directory: per cell, the request sequences, the metrics computed from the
// full data, the engine series the facts come from, and the published
// per-seed table.
type Compact struct {
	// Source says where the data comes from (for the embedded fixture: the
	// published experiment's repository, results/gen2-confirmatory/, and the
	// cells and files used).
	Source string
	Cells  []CompactCell
}

// Select returns c with only the cells named in names (arm labels, as
// ArmLabel gives them, or cell directory names; nil keeps every cell), each
// cut to its first seeds seeds (0 keeps them all). It is an error when no cell
// matches.
func (c Compact) Select(names []string, seeds int) (Compact, error) {
	if len(names) > 0 {
		want := map[string]bool{}
		for _, n := range names {
			want[strings.TrimSpace(n)] = true
		}
		var have []string
		var out []CompactCell
		for _, cell := range c.Cells {
			have = append(have, cell.ArmLabel())
			if want[cell.ArmLabel()] || want[cell.Name] {
				out = append(out, cell)
			}
		}
		if len(out) == 0 {
			return c, fmt.Errorf("matches no cell; the data has %s", strings.Join(have, ", "))
		}
		c.Cells = out
	}
	if seeds > 0 {
		cells := make([]CompactCell, len(c.Cells))
		for i, cell := range c.Cells {
			n := min(seeds, len(cell.Seeds))
			cell.Seeds, cell.SeedMetrics = cell.Seeds[:n], cell.SeedMetrics[:min(n, len(cell.SeedMetrics))]
			cells[i] = cell
		}
		c.Cells = cells
	}
	return c, nil
}

// CompactCell is one cell of a Compact.
type CompactCell struct {
	Name, Arm  string
	Beta       *float64
	Rate       float64
	Start, End float64 // window.env
	Seeds      []CompactSeed
	// SeedMetrics are Cell.SeedMetrics computed from the full data (ITL
	// included, which the compact rows cannot give), one per seed.
	SeedMetrics []map[string]float64
	Facts       Facts
	// Running is the vllm_num_requests_running engine series (one per
	// engine, sorted by instance), the same as Prom[RunningMetric].
	Running []Series
	// Prom holds the engine series of FixtureMetrics (labels dropped).
	Prom map[string][]Series
	// Published is the cell's rows of summary-per-seed.csv, one per seed in
	// Seeds order, under this package's metric keys (PublishedColumns); nil
	// when the directory had no summary.
	Published []map[string]float64
}

// CompactSeed is one seed's request sequence in file order. Times are rounded
// to the microsecond; TTFT is 0 on rows that are not OK.
type CompactSeed struct {
	Seed     int
	PrefixID []int
	Send     []float64 // Unix seconds
	TTFT     []float64 // seconds
	E2E      []float64 // seconds
	OK       []bool
}

// FixtureMetrics are the Prometheus metrics whose engine series a Compact
// keeps: everything Facts reads plus the LMCache object count.
var FixtureMetrics = []string{RunningMetric, WaitingMetric, KVUsageMetric, PreemptionsMetric,
	HitsMetric, QueriesMetric, TTFTCountMetric, TTFTSumMetric, PrefillCountMetric, PrefillSumMetric,
	CPUTierMetric, "lmcache_active_memory_objs_count"}

// PublishedColumns maps summary-per-seed.csv columns to metric keys.
var PublishedColumns = map[string]string{
	"ok": OKCount, "errors": Errors,
	"ttft_mean": TTFTMean, "ttft_p50": TTFTP50, "ttft_p90": TTFTP90, "ttft_p95": TTFTP95, "ttft_p99": TTFTP99,
	"itl_p50": ITLP50, "itl_p95": ITLP95, "itl_p99": ITLP99,
	"e2e_mean": E2EMean, "e2e_p95": E2EP95, "e2e_p99": E2EP99,
	"throughput_req_s": ReqS, "throughput_tok_s": TokS, "imbalance": ImbalanceKey,
}

// SummaryFile is the published per-seed table's name, next to the cell
// directories.
const SummaryFile = "summary-per-seed.csv"

// BuildCompact loads dir (see Load) and derives its Compact. The summary is
// read from dir/summary-per-seed.csv, or from the parent's when dir is one
// cell directory; when present it must have a row (run = cell name, seed) for
// every seed. Metrics missing from a cell are omitted from Prom; Facts must
// compute.
func BuildCompact(dir string) (Compact, error) {
	cells, err := Load(dir)
	if err != nil {
		return Compact{}, err
	}
	sumPath := filepath.Join(dir, SummaryFile)
	if isCellDir(dir) {
		sumPath = filepath.Join(filepath.Dir(filepath.Clean(dir)), SummaryFile)
	}
	published, err := readSummary(sumPath)
	if err != nil {
		return Compact{}, err
	}
	out := Compact{Source: "built from " + dir}
	for _, c := range cells {
		cc, err := compactCell(c)
		if err != nil {
			return Compact{}, err
		}
		if published != nil {
			for _, s := range c.Seeds {
				row, ok := published[c.Name+"/"+strconv.Itoa(s.Seed)]
				if !ok {
					return Compact{}, fmt.Errorf("capture: %s: no row for run %s seed %d", sumPath, c.Name, s.Seed)
				}
				cc.Published = append(cc.Published, row)
			}
		}
		out.Cells = append(out.Cells, cc)
	}
	return out, nil
}

func compactCell(c Cell) (CompactCell, error) {
	cc := CompactCell{Name: c.Name, Arm: c.Arm, Beta: c.Beta, Rate: c.Rate, Start: c.Start, End: c.End,
		Prom: map[string][]Series{}}
	var err error
	if cc.SeedMetrics, err = c.SeedMetrics(); err != nil {
		return cc, err
	}
	if cc.Facts, err = c.Facts(); err != nil {
		return cc, err
	}
	for _, m := range FixtureMetrics {
		for _, s := range c.Prom[m] {
			cc.Prom[m] = append(cc.Prom[m], Series{Instance: s.Instance, T: s.T, V: s.V})
		}
	}
	cc.Running = cc.Prom[RunningMetric]
	for _, s := range c.Seeds {
		cs := CompactSeed{Seed: s.Seed}
		for _, r := range s.Requests {
			cs.PrefixID = append(cs.PrefixID, r.PrefixID)
			cs.Send = append(cs.Send, c.Start+float64(micros(r.Send-c.Start))/1e6)
			cs.TTFT = append(cs.TTFT, float64(micros(r.TTFT))/1e6)
			cs.E2E = append(cs.E2E, float64(micros(r.E2E))/1e6)
			cs.OK = append(cs.OK, r.OK)
		}
		cc.Seeds = append(cc.Seeds, cs)
	}
	return cc, nil
}

// micros rounds seconds to integer microseconds.
func micros(s float64) int64 { return int64(math.Round(s * 1e6)) }

// readSummary reads a summary-per-seed.csv into rows keyed "<run>/<seed>";
// nil, nil when the file does not exist. Empty cells are omitted from a row.
func readSummary(path string) (map[string]map[string]float64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("capture: %s: %w", path, err)
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("capture: %s: empty", path)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[strings.TrimSpace(h)] = i
	}
	for _, need := range []string{"run", "seed"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("capture: %s: line 1: no %q column", path, need)
		}
	}
	out := map[string]map[string]float64{}
	for i, r := range recs[1:] {
		key := r[col["run"]] + "/" + r[col["seed"]]
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("capture: %s: line %d: run %s seed %s twice", path, i+2, r[col["run"]], r[col["seed"]])
		}
		row := map[string]float64{}
		for name, k := range PublishedColumns {
			j, ok := col[name]
			if !ok || strings.TrimSpace(r[j]) == "" {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(r[j]), 64)
			if err != nil {
				return nil, fmt.Errorf("capture: %s: line %d: column %s: bad number %q", path, i+2, name, r[j])
			}
			row[k] = v
		}
		out[key] = row
	}
	return out, nil
}

// Requests returns the seed's rows as Requests (Index = position; no token
// counts or ITLs, which a CompactSeed does not keep), so SeedMetrics gives
// every metric except the ITL ones and tok_s.
func (s CompactSeed) Requests() []Request {
	out := make([]Request, len(s.PrefixID))
	for i := range out {
		out[i] = Request{Index: i, PrefixID: s.PrefixID[i], Send: s.Send[i], TTFT: s.TTFT[i], E2E: s.E2E[i], OK: s.OK[i]}
	}
	return out
}

// Cell rebuilds a Cell from the compact data (rows as CompactSeed.Requests,
// Prom as kept), on which Cell.Facts and Cell.SeedMetrics run.
func (cc CompactCell) Cell() Cell {
	c := Cell{Name: cc.Name, Arm: cc.Arm, Beta: cc.Beta, Rate: cc.Rate, Start: cc.Start, End: cc.End,
		Prom: map[string][]Series{}}
	for m, ss := range cc.Prom {
		c.Prom[m] = ss
	}
	if _, ok := c.Prom[RunningMetric]; !ok && len(cc.Running) > 0 {
		c.Prom[RunningMetric] = cc.Running
	}
	for _, s := range cc.Seeds {
		c.Seeds = append(c.Seeds, Seed{Seed: s.Seed, Requests: s.Requests()})
	}
	return c
}

// ArmLabel is Cell.ArmLabel for the compact cell.
func (cc CompactCell) ArmLabel() string { return armLabel(cc.Arm, cc.Beta) }
