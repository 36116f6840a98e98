package capture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// RunningMetric is the gauge imbalance is computed from; every cell must have
// engine series of it.
const RunningMetric = "vllm_num_requests_running"

// Load reads every cell under dir: dir is either one cell directory (it holds
// run.json) or holds cell directories (subdirectories with a run.json), which
// are returned in name order. Any malformed or missing file is an error naming
// the file (and the line, for CSV rows).
func Load(dir string) ([]Cell, error) {
	if isCellDir(dir) {
		c, err := LoadCell(dir)
		if err != nil {
			return nil, err
		}
		return []Cell{c}, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	var cells []Cell
	for _, e := range ents { // ReadDir sorts by name
		sub := filepath.Join(dir, e.Name())
		if !e.IsDir() || !isCellDir(sub) {
			continue
		}
		c, err := LoadCell(sub)
		if err != nil {
			return nil, err
		}
		cells = append(cells, c)
	}
	if len(cells) == 0 {
		return nil, fmt.Errorf("capture: %s: no cell directories (a cell directory holds run.json)", dir)
	}
	return cells, nil
}

// IsCapture reports whether dir is a capture in the published layout: a cell
// directory (it holds run.json) or a directory holding one or more.
func IsCapture(dir string) bool {
	if isCellDir(dir) {
		return true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if e.IsDir() && isCellDir(filepath.Join(dir, e.Name())) {
			return true
		}
	}
	return false
}

func isCellDir(dir string) bool {
	st, err := os.Stat(filepath.Join(dir, "run.json"))
	return err == nil && st.Mode().IsRegular()
}

// LoadCell reads one cell directory: run.json (arm, beta, rate_req_s and the
// workload manifest's seeds), window.env (CELL_START, CELL_END),
// driver-seed<N>.csv for every seed (those the manifest lists, else 1..the
// highest present; none may be missing) and prom/*.json, of which
// vllm_num_requests_running must have engine series.
func LoadCell(dir string) (Cell, error) {
	c := Cell{Name: filepath.Base(filepath.Clean(dir))}
	manifest, err := readRun(filepath.Join(dir, "run.json"), &c)
	if err != nil {
		return Cell{}, err
	}
	if c.Start, c.End, err = readWindow(filepath.Join(dir, "window.env")); err != nil {
		return Cell{}, err
	}
	if c.Seeds, err = readSeeds(dir, manifest); err != nil {
		return Cell{}, err
	}
	if c.Prom, err = readPromDir(filepath.Join(dir, "prom")); err != nil {
		return Cell{}, err
	}
	return c, nil
}

type runFile struct {
	Arm      *string         `json:"arm"`
	Beta     json.RawMessage `json:"beta"`
	Rate     json.RawMessage `json:"rate_req_s"`
	Manifest *struct {
		Seeds map[string]json.RawMessage `json:"seeds"`
	} `json:"workload_manifest"`
}

// readRun fills c's arm, beta and rate and returns the seeds the manifest
// lists (nil when it lists none).
func readRun(path string, c *Cell) ([]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	var r runFile
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("capture: %s: bad JSON: %w", path, err)
	}
	if r.Arm == nil || *r.Arm == "" {
		return nil, fmt.Errorf("capture: %s: no \"arm\"", path)
	}
	beta, err := jsonNumber(r.Beta)
	if err != nil {
		return nil, fmt.Errorf("capture: %s: \"beta\": %w", path, err)
	}
	rate, err := jsonNumber(r.Rate)
	if err != nil || rate == nil || !(*rate > 0) {
		return nil, fmt.Errorf("capture: %s: no positive \"rate_req_s\"", path)
	}
	c.Arm, c.Beta, c.Rate = *r.Arm, beta, *rate
	var seeds []int
	if r.Manifest != nil {
		for k := range r.Manifest.Seeds {
			n, err := strconv.Atoi(k)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("capture: %s: workload_manifest seed %q is not a seed number", path, k)
			}
			seeds = append(seeds, n)
		}
	}
	slices.Sort(seeds)
	return seeds, nil
}

// jsonNumber reads a JSON number or a string holding one (the published
// run.json writes beta as "0.5"); absent, null and "" are nil.
func jsonNumber(raw json.RawMessage) (*float64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		if x == "" {
			return nil, nil
		}
		var err error
		if f, err = strconv.ParseFloat(x, 64); err != nil {
			return nil, fmt.Errorf("%q is not a number", x)
		}
	default:
		return nil, fmt.Errorf("%s is not a number", raw)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("%s is not finite", raw)
	}
	return &f, nil
}

// readWindow parses KEY=VALUE lines; CELL_START and CELL_END must be numbers
// with CELL_START < CELL_END.
func readWindow(path string) (start, end float64, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("capture: %w", err)
	}
	vals := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		k, v, ok := strings.Cut(s, "=")
		if !ok {
			return 0, 0, fmt.Errorf("capture: %s: line %d: not KEY=VALUE: %q", path, line, s)
		}
		vals[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	get := func(k string) (float64, error) {
		v, ok := vals[k]
		if !ok {
			return 0, fmt.Errorf("capture: %s: no %s", path, k)
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("capture: %s: %s=%q is not a number", path, k, v)
		}
		return f, nil
	}
	if start, err = get("CELL_START"); err != nil {
		return 0, 0, err
	}
	if end, err = get("CELL_END"); err != nil {
		return 0, 0, err
	}
	if !(start < end) {
		return 0, 0, fmt.Errorf("capture: %s: CELL_START %v not before CELL_END %v", path, start, end)
	}
	return start, end, nil
}

var seedFile = regexp.MustCompile(`^driver-seed([0-9]+)\.csv$`)

func readSeeds(dir string, manifest []int) ([]Seed, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	present := map[int]string{}
	for _, e := range ents {
		m := seedFile.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			continue
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("capture: %s: bad seed number", filepath.Join(dir, e.Name()))
		}
		if prev, dup := present[n]; dup {
			return nil, fmt.Errorf("capture: %s and %s: seed %d twice", prev, e.Name(), n)
		}
		present[n] = e.Name()
	}
	want := manifest
	if len(want) == 0 {
		want = slices.Sorted(maps.Keys(present))
		if len(want) > 0 && want[0] >= 1 {
			want = make([]int, want[len(want)-1])
			for i := range want {
				want[i] = i + 1
			}
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("capture: %s: missing driver-seed1.csv (no driver-seed<N>.csv files)", dir)
	}
	seeds := make([]Seed, 0, len(want))
	for _, n := range want {
		path := filepath.Join(dir, fmt.Sprintf("driver-seed%d.csv", n))
		if _, ok := present[n]; !ok {
			return nil, fmt.Errorf("capture: %s: missing (seed %d of %d expected)", path, n, len(want))
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		reqs, err := parseDriver(bufio.NewReaderSize(f, 1<<16), path)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		seeds = append(seeds, Seed{Seed: n, Requests: reqs})
	}
	for n, name := range present {
		if !slices.Contains(want, n) {
			return nil, fmt.Errorf("capture: %s: seed %d is not in run.json's workload manifest", filepath.Join(dir, name), n)
		}
	}
	return seeds, nil
}

func readPromDir(dir string) (map[string][]Series, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("capture: %s: missing (the Prometheus range queries)", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	out := map[string][]Series{}
	for _, e := range ents {
		stem, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		ss, err := ParseQueryRange(data, path)
		if err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
		if len(ss) > 0 {
			out[stem] = ss
		}
	}
	path := filepath.Join(dir, RunningMetric+".json")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("capture: %s: missing (imbalance needs it)", path)
	}
	if len(out[RunningMetric]) == 0 {
		return nil, fmt.Errorf("capture: %s: no engine series (an instance label and job other than \"router\")", path)
	}
	if err := oneSeriesPerInstance(out[RunningMetric]); err != nil {
		return nil, fmt.Errorf("capture: %s: %w", path, err)
	}
	return out, nil
}

func oneSeriesPerInstance(ss []Series) error {
	for i := 1; i < len(ss); i++ {
		if ss[i].Instance == ss[i-1].Instance {
			return fmt.Errorf("two engine series for instance %s", ss[i].Instance)
		}
	}
	return nil
}
