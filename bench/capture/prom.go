package capture

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// promResponse is the body of a Prometheus /api/v1/query_range answer, as
// ParseQueryRange reads it and WriteProm writes it.
type promResponse struct {
	Status string `json:"status"`
	Data   struct {
		ResultType string         `json:"resultType"`
		Result     []matrixSeries `json:"result"`
	} `json:"data"`
}

// matrixSeries is one series of a query_range matrix: its labels and its
// [time, "value"] samples.
type matrixSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// isEngine reports whether a series is an engine's own: it carries an
// instance label and is not the router's re-export (job="router").
func isEngine(labels map[string]string) bool {
	return labels["instance"] != "" && labels["job"] != "router"
}

// ParseQueryRange parses the body of a Prometheus /api/v1/query_range answer
// (a matrix, as a prom/ file of a cell holds) and returns its engine series
// (see Series), sorted by instance and then by their other labels. The matrix
// must be non-empty, every series must have samples with ascending timestamps
// and finite values, and each sample must be [<unix seconds number>, "<value
// string>"]. name is used in errors.
func ParseQueryRange(data []byte, name string) ([]Series, error) {
	var resp promResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("%s: bad JSON: %w", name, err)
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("%s: status %q, want \"success\"", name, resp.Status)
	}
	if resp.Data.ResultType != "matrix" {
		return nil, fmt.Errorf("%s: resultType %q, want \"matrix\"", name, resp.Data.ResultType)
	}
	if len(resp.Data.Result) == 0 {
		return nil, fmt.Errorf("%s: empty matrix (no series)", name)
	}
	var out []Series
	for i, r := range resp.Data.Result {
		if !isEngine(r.Metric) {
			continue
		}
		if len(r.Values) == 0 {
			return nil, fmt.Errorf("%s: series %d (instance %s): no samples", name, i, r.Metric["instance"])
		}
		s := Series{Instance: r.Metric["instance"], Labels: r.Metric,
			T: make([]float64, len(r.Values)), V: make([]float64, len(r.Values))}
		for j, pair := range r.Values {
			t, v, err := parseSample(pair)
			if err != nil {
				return nil, fmt.Errorf("%s: series %d (instance %s) sample %d: %w", name, i, s.Instance, j, err)
			}
			if j > 0 && t <= s.T[j-1] {
				return nil, fmt.Errorf("%s: series %d (instance %s) sample %d: timestamp %v not after %v", name, i, s.Instance, j, t, s.T[j-1])
			}
			s.T[j], s.V[j] = t, v
		}
		out = append(out, s)
	}
	SortSeries(out)
	return out, nil
}

func parseSample(pair [2]any) (t, v float64, err error) {
	t, ok := pair[0].(float64)
	if !ok || math.IsNaN(t) || math.IsInf(t, 0) {
		return 0, 0, fmt.Errorf("timestamp %v is not a number", pair[0])
	}
	s, ok := pair[1].(string)
	if !ok {
		return 0, 0, fmt.Errorf("value %v is not a string", pair[1])
	}
	v, err = strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, 0, fmt.Errorf("bad value %q", s)
	}
	return t, v, nil
}

// SortSeries orders series by instance, then by LabelKey (stable).
func SortSeries(ss []Series) {
	slices.SortStableFunc(ss, func(a, b Series) int {
		if c := strings.Compare(a.Instance, b.Instance); c != 0 {
			return c
		}
		return strings.Compare(LabelKey(a.Labels), LabelKey(b.Labels))
	})
}

// LabelKey is a canonical string of a label set: name=value pairs in name
// order, each value quoted, so two sets have the same key only when equal.
func LabelKey(l map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(l)) {
		b.WriteString(k + "=" + strconv.Quote(l[k]) + ",")
	}
	return b.String()
}
