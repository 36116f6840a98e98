package capture

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

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
				ok.WriteByte("01"[b2i(s.OK[i])])
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

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

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
