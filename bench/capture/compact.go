package capture

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// CompactFormat names the on-disk layout WriteCompact writes.
const CompactFormat = "loadaware-capture-compact/1"

// gen2 is the published gen2 sweep, written by
//
//	go run ./bench/capture/cmd/mkfixture -in <published-gen2 dir> -out bench/capture/gen2.json.gz
//
// Its Source field says where the data comes from.
//
//go:embed gen2.json.gz
var gen2 []byte

// Embedded returns the compact fixture of the published gen2 sweep (six cells,
// 20 seeds each, in cell-name order). Each call decodes afresh, so the caller
// owns the result and may modify it.
func Embedded() (Compact, error) {
	c, err := ReadCompact(bytes.NewReader(gen2))
	if err != nil {
		return Compact{}, fmt.Errorf("capture: embedded gen2 fixture: %w", err)
	}
	return c, nil
}

// WriteCompact writes c as gzip-compressed JSON: times as integer
// microseconds (sends as deltas within a seed), non-finite numbers as the
// strings "NaN", "+Inf", "-Inf". ReadCompact gives c back exactly, provided
// the seed times are whole microseconds (as BuildCompact makes them).
func WriteCompact(w io.Writer, c Compact) error {
	d := diskCompact{Format: CompactFormat, Source: c.Source}
	for _, cc := range c.Cells {
		dc := diskCell{Name: cc.Name, Arm: cc.Arm, Beta: cc.Beta, Rate: cc.Rate, Start: cc.Start, End: cc.End,
			Facts: factsToDisk(cc.Facts), Prom: map[string][]diskSeries{}}
		for _, s := range cc.Seeds {
			ds := diskSeed{Seed: s.Seed, PrefixID: s.PrefixID}
			var ok strings.Builder
			prev := int64(0)
			for i := range s.PrefixID {
				at := micros(s.Send[i] - cc.Start)
				ds.Send = append(ds.Send, at-prev)
				prev = at
				ds.TTFT = append(ds.TTFT, micros(s.TTFT[i]))
				ds.E2E = append(ds.E2E, micros(s.E2E[i]))
				ok.WriteByte(okDigit[s.OK[i]])
			}
			ds.OK = ok.String()
			dc.Seeds = append(dc.Seeds, ds)
		}
		dc.SeedMetrics = convMaps[num](cc.SeedMetrics)
		dc.Published = convMaps[num](cc.Published)
		prom := cc.Prom
		if len(prom) == 0 && len(cc.Running) > 0 {
			prom = map[string][]Series{RunningMetric: cc.Running}
		}
		for m, ss := range prom {
			for _, s := range ss {
				dc.Prom[m] = append(dc.Prom[m], diskSeries{Instance: s.Instance, T: s.T, V: s.V})
			}
		}
		d.Cells = append(d.Cells, dc)
	}
	zw := gzip.NewWriter(w)
	enc := json.NewEncoder(zw)
	if err := enc.Encode(d); err != nil {
		return fmt.Errorf("capture: encoding compact: %w", err)
	}
	return zw.Close()
}

// ReadCompact reads what WriteCompact wrote.
func ReadCompact(r io.Reader) (Compact, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return Compact{}, fmt.Errorf("capture: compact: %w", err)
	}
	var d diskCompact
	if err := json.NewDecoder(zr).Decode(&d); err != nil {
		return Compact{}, fmt.Errorf("capture: compact: bad JSON: %w", err)
	}
	if d.Format != CompactFormat {
		return Compact{}, fmt.Errorf("capture: compact: format %q, want %q", d.Format, CompactFormat)
	}
	c := Compact{Source: d.Source}
	for _, dc := range d.Cells {
		cc := CompactCell{Name: dc.Name, Arm: dc.Arm, Beta: dc.Beta, Rate: dc.Rate, Start: dc.Start, End: dc.End,
			Facts: factsFromDisk(dc.Facts), SeedMetrics: convMaps[float64](dc.SeedMetrics),
			Published: convMaps[float64](dc.Published), Prom: map[string][]Series{}}
		for _, ds := range dc.Seeds {
			n := len(ds.PrefixID)
			if len(ds.Send) != n || len(ds.TTFT) != n || len(ds.E2E) != n || len(ds.OK) != n {
				return Compact{}, fmt.Errorf("capture: compact: cell %s seed %d: columns of different lengths", dc.Name, ds.Seed)
			}
			s := CompactSeed{Seed: ds.Seed, PrefixID: ds.PrefixID, Send: make([]float64, n),
				TTFT: make([]float64, n), E2E: make([]float64, n), OK: make([]bool, n)}
			at := int64(0)
			for i := range n {
				at += ds.Send[i]
				s.Send[i] = dc.Start + float64(at)/1e6
				s.TTFT[i] = float64(ds.TTFT[i]) / 1e6
				s.E2E[i] = float64(ds.E2E[i]) / 1e6
				s.OK[i] = ds.OK[i] == '1'
			}
			cc.Seeds = append(cc.Seeds, s)
		}
		for m, ss := range dc.Prom {
			for _, s := range ss {
				if len(s.T) != len(s.V) {
					return Compact{}, fmt.Errorf("capture: compact: cell %s %s %s: T and V of different lengths", dc.Name, m, s.Instance)
				}
				cc.Prom[m] = append(cc.Prom[m], Series{Instance: s.Instance, T: s.T, V: s.V})
			}
		}
		cc.Running = cc.Prom[RunningMetric]
		c.Cells = append(c.Cells, cc)
	}
	return c, nil
}

// okDigit is a request's character in diskSeed.OK.
var okDigit = map[bool]byte{false: '0', true: '1'}

type diskCompact struct {
	Format string     `json:"format"`
	Source string     `json:"source"`
	Cells  []diskCell `json:"cells"`
}

type diskCell struct {
	Name        string                  `json:"name"`
	Arm         string                  `json:"arm"`
	Beta        *float64                `json:"beta"`
	Rate        float64                 `json:"rate"`
	Start       float64                 `json:"start"`
	End         float64                 `json:"end"`
	Seeds       []diskSeed              `json:"seeds"`
	SeedMetrics []map[string]num        `json:"seed_metrics"`
	Facts       diskFacts               `json:"facts"`
	Prom        map[string][]diskSeries `json:"prom"`
	Published   []map[string]num        `json:"published,omitempty"`
}

type diskSeed struct {
	Seed     int     `json:"seed"`
	PrefixID []int   `json:"prefix_id"`
	Send     []int64 `json:"send_us_delta"` // first: from the cell's start
	TTFT     []int64 `json:"ttft_us"`
	E2E      []int64 `json:"e2e_us"`
	OK       string  `json:"ok"` // one '1' or '0' per request
}

type diskSeries struct {
	Instance string    `json:"instance"`
	T        []float64 `json:"t"`
	V        []float64 `json:"v"`
}

type diskFacts struct {
	Instances          []string `json:"instances"`
	HitRate            num      `json:"hit_rate"`
	WaitingShare       num      `json:"waiting_share"`
	WaitingShareEngine []num    `json:"waiting_share_engine"`
	Preemptions        []num    `json:"preemptions"`
	KVUsageMax         []num    `json:"kv_usage_max"`
	CPUTierBytes       []num    `json:"cpu_tier_bytes"`
	RequestShare       []num    `json:"request_share"`
	EngineTTFTMean     []num    `json:"engine_ttft_mean"`
	PrefillMean        []num    `json:"prefill_mean"`
}

func factsToDisk(f Facts) diskFacts {
	return diskFacts{Instances: f.Instances, HitRate: num(f.HitRate), WaitingShare: num(f.WaitingShare),
		WaitingShareEngine: conv[num](f.WaitingShareEngine), Preemptions: conv[num](f.Preemptions),
		KVUsageMax: conv[num](f.KVUsageMax), CPUTierBytes: conv[num](f.CPUTierBytes), RequestShare: conv[num](f.RequestShare),
		EngineTTFTMean: conv[num](f.EngineTTFTMean), PrefillMean: conv[num](f.PrefillMean)}
}

func factsFromDisk(d diskFacts) Facts {
	return Facts{Instances: d.Instances, HitRate: float64(d.HitRate), WaitingShare: float64(d.WaitingShare),
		WaitingShareEngine: conv[float64](d.WaitingShareEngine), Preemptions: conv[float64](d.Preemptions),
		KVUsageMax: conv[float64](d.KVUsageMax), CPUTierBytes: conv[float64](d.CPUTierBytes), RequestShare: conv[float64](d.RequestShare),
		EngineTTFTMean: conv[float64](d.EngineTTFTMean), PrefillMean: conv[float64](d.PrefillMean)}
}

// num is a float64 whose JSON form also carries NaN and infinities (as the
// strings "NaN", "+Inf", "-Inf").
type num float64

func (n num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	switch {
	case math.IsNaN(f):
		return []byte(`"NaN"`), nil
	case math.IsInf(f, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(f, -1):
		return []byte(`"-Inf"`), nil
	}
	return strconv.AppendFloat(nil, f, 'g', -1, 64), nil
}

func (n *num) UnmarshalJSON(b []byte) error {
	s := string(b)
	if uq, err := strconv.Unquote(s); err == nil {
		if uq != "NaN" && uq != "+Inf" && uq != "-Inf" {
			return fmt.Errorf("number %s", s)
		}
		s = uq
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("number %s", b)
	}
	*n = num(f)
	return nil
}

// conv converts a slice between float64 and num (nil stays nil).
func conv[To, From ~float64](v []From) []To {
	if v == nil {
		return nil
	}
	out := make([]To, len(v))
	for i, x := range v {
		out[i] = To(x)
	}
	return out
}

// convMaps converts a slice of maps between float64 and num values (nil stays nil).
func convMaps[To, From ~float64](ms []map[string]From) []map[string]To {
	if ms == nil {
		return nil
	}
	out := make([]map[string]To, len(ms))
	for i, m := range ms {
		out[i] = make(map[string]To, len(m))
		for k, v := range m {
			out[i][k] = To(v)
		}
	}
	return out
}
