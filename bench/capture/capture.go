// Package capture reads a measurement directory in the published layout (one
// directory per cell with driver-seed<N>.csv, prom/<metric>.json, run.json and
// window.env; see the published experiment's results/gen2-confirmatory/) and
// computes every metric the benchmark's replay compares, with the same code for
// real and for simulated data.
//
// It also carries a compact fixture of the published gen2 sweep (Embedded), so
// that tests and the replay never need the full measurement directory.
//
// Nothing here reads clocks or globals; Load and BuildCompact read only the
// directory they are given.
package capture

import (
	"strconv"
)

// Request is one client-side row of a driver-seed<N>.csv file.
//
// For rows whose status is not "ok" the driver leaves ttft_s, the token counts
// and itls_ms empty; they are 0 (nil for ITLs) here, and OK is false.
type Request struct {
	Index, PrefixID                int
	Send                           float64 // Unix seconds (send_ts)
	TTFT, E2E                      float64 // seconds
	PromptTokens, CompletionTokens int
	OK                             bool      // status == "ok"
	Error                          string    // the error column, verbatim
	ITLs                           []float64 // gaps between streamed tokens, milliseconds
}

// Seed is one driver-seed<N>.csv file: its requests in file order.
type Seed struct {
	Seed     int
	Requests []Request
}

// Series is one engine's samples of one metric: T in Unix seconds, ascending,
// and V the sample values. Labels are the series' Prometheus labels (including
// __name__), kept so that several series of one instance (histogram buckets)
// stay distinguishable.
type Series struct {
	Instance string
	T, V     []float64
	Labels   map[string]string `json:",omitempty"`
}

// Cell is one cell directory.
type Cell struct {
	Name, Arm  string   // directory name; arm from run.json ("kvaware", "loadaware", "roundrobin", ...)
	Beta       *float64 // nil when run.json has null or no beta
	Rate       float64  // run.json rate_req_s
	Start, End float64  // window.env CELL_START, CELL_END (Unix seconds)
	Seeds      []Seed   // ordered by seed number
	// Prom maps a metric name (the file stem under prom/) to its engine
	// series, sorted by instance (then by labels). Metrics whose file holds no
	// engine series (the router's own process metrics) are absent.
	Prom map[string][]Series
}

// ArmLabel names the arm with its beta: "kvaware", "roundrobin",
// "loadaware-b0", "loadaware-b0.5", "loadaware-b1", "loadaware-b2" (beta
// formatted with strconv 'g'). An arm without beta is its bare name.
func (c Cell) ArmLabel() string {
	return armLabel(c.Arm, c.Beta)
}

func armLabel(arm string, beta *float64) string {
	if beta == nil {
		return arm
	}
	return arm + "-b" + strconv.FormatFloat(*beta, 'g', -1, 64)
}
