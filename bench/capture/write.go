package capture

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// The writers below make a cell directory that Load reads back as it was
// written: a driver that records seed by seed calls WriteSeed after each seed
// and WriteMeta after each (so the directory is a valid cell listing the seeds
// done so far, whenever it is stopped), and WriteProm once per metric. Each file is written to a temporary name in the
// same directory and renamed into place, so a reader never sees half a file.

// reserved are the run.json keys WriteMeta owns.
var reserved = map[string]bool{"arm": true, "beta": true, "rate_req_s": true, "workload_manifest": true}

// WriteMeta writes run.json (arm, beta or null, rate_req_s, a workload
// manifest listing seeds, and extra's keys, which may not be those four) and
// window.env (CELL_START, CELL_END from c) to dir.
func WriteMeta(dir string, c Cell, seeds []int, extra map[string]any) error {
	switch {
	case c.Arm == "":
		return fmt.Errorf("capture: write %s: the cell has no arm", dir)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("capture: write %s: rate %v: a cell's rate is a positive number of requests per second", dir, c.Rate)
	case !(c.Start < c.End) || math.IsInf(c.End-c.Start, 0):
		return fmt.Errorf("capture: write %s: window [%v, %v]: the start comes before the end", dir, c.Start, c.End)
	}
	run := map[string]any{}
	for k, v := range extra {
		if reserved[k] {
			return fmt.Errorf("capture: write %s: extra key %q is one run.json writes itself", dir, k)
		}
		run[k] = v
	}
	manifest := map[string]any{}
	for _, s := range seeds {
		manifest[strconv.Itoa(s)] = map[string]any{"file": fmt.Sprintf("driver-seed%d.csv", s)}
	}
	run["arm"], run["rate_req_s"], run["workload_manifest"] = c.Arm, c.Rate, map[string]any{"seeds": manifest}
	if c.Beta != nil {
		run["beta"] = *c.Beta
	} else {
		run["beta"] = nil
	}
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return fmt.Errorf("capture: write %s: run.json: %w", dir, err)
	}
	if err := putFile(filepath.Join(dir, "run.json"), append(b, '\n')); err != nil {
		return err
	}
	window := fmt.Sprintf("CELL_START=%s\nCELL_END=%s\n", fmtFloat(c.Start), fmtFloat(c.End))
	return putFile(filepath.Join(dir, "window.env"), []byte(window))
}

// WriteSeed writes one driver-seed<N>.csv to dir with the published columns.
// A row whose OK is false is written with status "error" and its error text;
// its TTFT, token counts and ITLs are left empty when zero.
func WriteSeed(dir string, s Seed) error {
	if s.Seed < 0 {
		return fmt.Errorf("capture: write %s: seed %d: seeds are 0 or more", dir, s.Seed)
	}
	return writeWith(filepath.Join(dir, fmt.Sprintf("driver-seed%d.csv", s.Seed)), func(w *bufio.Writer) error {
		cw := csv.NewWriter(w)
		if err := cw.Write(driverColumns); err != nil {
			return err
		}
		for _, r := range s.Requests {
			if err := cw.Write(driverRow(r)); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	})
}

func driverRow(r Request) []string {
	status, ttft, prompt, completion := "ok", fmtFloat(r.TTFT), strconv.Itoa(r.PromptTokens), strconv.Itoa(r.CompletionTokens)
	if !r.OK {
		status = "error"
		if r.TTFT == 0 {
			ttft = ""
		}
		if r.PromptTokens == 0 {
			prompt = ""
		}
		if r.CompletionTokens == 0 {
			completion = ""
		}
	}
	itls := make([]string, len(r.ITLs))
	for i, v := range r.ITLs {
		itls[i] = fmtFloat(v)
	}
	// The columns in driverColumns order.
	return []string{strconv.Itoa(r.Index), strconv.Itoa(r.PrefixID), fmtFloat(r.Send), ttft, fmtFloat(r.E2E),
		prompt, completion, status, r.Error, strings.Join(itls, ";")}
}

// metricName is what a prom/ file may be named: a Prometheus metric name.
var metricName = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)

// WriteProm writes prom/<metric>.json to dir: series as a Prometheus
// query_range matrix. Each series keeps its labels, with instance and
// __name__ set; its samples must be finite with ascending times.
func WriteProm(dir, metric string, series []Series) error {
	if !metricName.MatchString(metric) {
		return fmt.Errorf("capture: write %s: %q is not a metric name", dir, metric)
	}
	out := promResponse{Status: "success"}
	out.Data.ResultType = "matrix"
	out.Data.Result = []matrixSeries{}
	for _, s := range series {
		if s.Instance == "" || len(s.T) == 0 || len(s.T) != len(s.V) {
			return fmt.Errorf("capture: write %s: %s: a series needs an instance and as many values as times, at least one", dir, metric)
		}
		labels := map[string]string{}
		maps.Copy(labels, s.Labels)
		labels["__name__"], labels["instance"] = metric, s.Instance
		r := matrixSeries{Metric: labels, Values: make([][2]any, len(s.T))}
		for i := range s.T {
			if math.IsNaN(s.V[i]) || math.IsInf(s.V[i], 0) || math.IsNaN(s.T[i]) || (i > 0 && !(s.T[i] > s.T[i-1])) {
				return fmt.Errorf("capture: write %s: %s instance %s sample %d: times ascend and values are finite", dir, metric, s.Instance, i)
			}
			r.Values[i] = [2]any{json.Number(fmtFloat(s.T[i])), fmtFloat(s.V[i])}
		}
		out.Data.Result = append(out.Data.Result, r)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("capture: write %s: %w", dir, err)
	}
	return putFile(filepath.Join(dir, "prom", metric+".json"), b)
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func putFile(path string, b []byte) error {
	return writeWith(path, func(w *bufio.Writer) error { _, err := w.Write(b); return err })
}

// writeWith writes path through a temporary file in its directory, renamed
// into place once complete.
func writeWith(path string, fill func(*bufio.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("capture: %w", err)
	}
	w := bufio.NewWriter(f)
	err = fill(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("capture: write %s: %w", path, err)
	}
	return nil
}
