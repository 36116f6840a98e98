package tournament

import (
	"encoding/json"
	"io"
	"strconv"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// The JSON results, for other tools to check:
//
//	{"seeds": [1, ...], "sample_interval_s": 0.25,
//	 "profiles": [{"name": "published", "about": "...", "fleet": "...", "best": "kvaware",
//	   "arms": [{"arm": "kvaware", "policy": "kvaware", "beta": 1,
//	     "medians": {"ttft_p95": x, ...},
//	     "seeds": [{"seed": 1, "ttft_p95": x, "imbalance": x, "hit_rate": x, ...}]}],
//	   "tests": [{"arm": "...", "against": "...", ...}],
//	   "trace": {"windows": 3, "speedup": 1, "requests": n, "context_tokens": 32768,
//	     "capped_prompts": n, "reuse_ceiling": x}}]}   (trace profiles only)
//
// Metric values are rounded to 6 significant digits; numbers that are not
// finite (a NaN latency, an +Inf imbalance) are null.
type jsonResult struct {
	Seeds          []uint64      `json:"seeds"`
	SampleInterval float64       `json:"sample_interval_s"`
	Profiles       []jsonProfile `json:"profiles"`
}

type jsonProfile struct {
	Name  string     `json:"name"`
	About string     `json:"about"`
	Fleet string     `json:"fleet"`
	Best  string     `json:"best"`
	Arms  []jsonArm  `json:"arms"`
	Tests []jsonTest `json:"tests"`
	Trace *jsonTrace `json:"trace,omitempty"`
}

// jsonTrace is a trace profile's selection: what was replayed and changed.
type jsonTrace struct {
	Windows      int     `json:"windows"`
	Speedup      float64 `json:"speedup"`
	Requests     int     `json:"requests"`
	Context      int     `json:"context_tokens"`
	Capped       int     `json:"capped_prompts"`
	ReuseCeiling float64 `json:"reuse_ceiling"`
}

type jsonArm struct {
	Arm     string                `json:"arm"`
	Policy  string                `json:"policy"`
	Beta    float64               `json:"beta"`
	Medians map[string]*float64   `json:"medians"`
	Seeds   []map[string]*float64 `json:"seeds"` // "seed" and every metric
}

type jsonTest struct {
	Arm       string   `json:"arm"`
	Against   string   `json:"against"`
	Seeds     int      `json:"seeds"`
	Improved  int      `json:"seeds_lower"`
	Reduction *float64 `json:"median_reduction"`
	CILo      *float64 `json:"ci_lo"`
	CIHi      *float64 `json:"ci_hi"`
	PBetter   *float64 `json:"p_lower"`
	PWorse    *float64 `json:"p_higher"`
	Verdict   string   `json:"verdict"`
	Note      string   `json:"note,omitempty"`
}

// WriteJSON writes res as compact JSON (the layout above) on one line, keys
// of each seed and of the medians sorted, so equal results give equal bytes.
func WriteJSON(w io.Writer, res Result) error {
	out := jsonResult{Seeds: res.Seeds, SampleInterval: res.SampleInterval.Seconds(), Profiles: []jsonProfile{}}
	for _, p := range res.Profiles {
		jp := jsonProfile{Name: p.Profile.Name, About: p.Profile.About, Fleet: FleetText(p.Profile), Best: p.Arms[p.Best()].Arm.Name}
		if tr := p.Profile.Trace; tr != nil {
			jp.Trace = &jsonTrace{Windows: len(tr.Windows), Speedup: tr.Options.Speedup, Requests: tr.Requests, Context: tr.Options.Context,
				Capped: tr.Capped, ReuseCeiling: *finiteOrNil(tr.Reuse.Fraction())}
		}
		for _, a := range p.Arms {
			ja := jsonArm{Arm: a.Arm.Name, Policy: a.Arm.Policy, Beta: a.Arm.Beta, Medians: map[string]*float64{}}
			for _, m := range Metrics {
				ja.Medians[m] = finiteOrNil(a.Median(m))
			}
			for _, s := range a.Seeds {
				seed := float64(s.Seed)
				js := map[string]*float64{"seed": &seed}
				for _, m := range Metrics {
					js[m] = finiteOrNil(capture.Metric(s.Metrics, m))
				}
				ja.Seeds = append(ja.Seeds, js)
			}
			jp.Arms = append(jp.Arms, ja)
		}
		for _, t := range p.Tests() {
			jp.Tests = append(jp.Tests, jsonTest{Arm: t.Arm, Against: t.Against, Seeds: t.Seeds, Improved: t.Improved,
				Reduction: finiteOrNil(t.Reduction), CILo: finiteOrNil(t.CILo), CIHi: finiteOrNil(t.CIHi),
				PBetter: finiteOrNil(t.PBetter), PWorse: finiteOrNil(t.PWorse), Verdict: t.Verdict, Note: t.Note})
		}
		out.Profiles = append(out.Profiles, jp)
	}
	return json.NewEncoder(w).Encode(out)
}

// finiteOrNil is x to 6 significant digits, or nil when x is not finite.
func finiteOrNil(x float64) *float64 {
	if !stats.Finite(x) {
		return nil
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 6, 64), 64)
	return &r
}
