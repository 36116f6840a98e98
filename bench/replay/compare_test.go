package replay

import (
	"math"
	"testing"
)

func TestOrderCountsDiscordantPairs(t *testing.T) {
	tests := []struct {
		name      string
		real, sim map[string]float64
		want      int
	}{
		{"same order", map[string]float64{"a": 1, "b": 2, "c": 3}, map[string]float64{"a": 10, "b": 20, "c": 30}, 0},
		{"one swap", map[string]float64{"a": 1, "b": 2, "c": 3}, map[string]float64{"a": 20, "b": 10, "c": 30}, 1},
		{"reversed", map[string]float64{"a": 1, "b": 2, "c": 3}, map[string]float64{"a": 3, "b": 2, "c": 1}, 3},
		{"tie on one side only", map[string]float64{"a": 1, "b": 1}, map[string]float64{"a": 1, "b": 2}, 1},
		{"arm missing on one side is left out", map[string]float64{"a": 1, "b": 2, "x": 0}, map[string]float64{"a": 1, "b": 2}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := Order(tt.real, tt.sim)
			if len(o.Discordant) != tt.want {
				t.Fatalf("discordant %v, want %d pairs", o.Discordant, tt.want)
			}
		})
	}
	o := Order(map[string]float64{"a": 2, "b": 1}, map[string]float64{"a": 1, "b": 2})
	if o.Real[0] != "b" || o.Sim[0] != "a" {
		t.Fatalf("orders %v / %v: want lowest first", o.Real, o.Sim)
	}
}

func TestSpearman(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name string
		x, y []float64
		want float64
	}{
		{"monotone", []float64{1, 2, 3, 4}, []float64{10, 20, 25, 100}, 1},
		{"reversed", []float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		{"ties get average ranks", []float64{1, 2, 2, 3}, []float64{1, 2, 3, 4}, 0.9486832980505138},
		{"NaN pairs left out", []float64{1, nan, 2, 3}, []float64{1, 5, 2, 3}, 1},
		{"too few pairs", []float64{1, 2}, []float64{1, 2}, nan},
		{"constant side", []float64{1, 1, 1}, []float64{1, 2, 3}, nan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Spearman(tt.x, tt.y)
			if math.IsNaN(tt.want) {
				if !math.IsNaN(got) {
					t.Fatalf("got %v, want NaN", got)
				}
				return
			}
			if math.Abs(got-tt.want) > 1e-12 {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPairedVerdicts(t *testing.T) {
	base := map[uint64]float64{}
	for i := range 20 {
		base[uint64(i+1)] = 1 + float64(i)/10
	}
	scale := func(f float64) map[uint64]float64 {
		out := map[uint64]float64{}
		for s, b := range base {
			out[s] = b * f
		}
		return out
	}
	tests := []struct {
		name    string
		cand    map[uint64]float64
		verdict string
		effect  float64
	}{
		{"lower on every seed", scale(0.8), "better", 0.2},
		{"higher on every seed", scale(1.25), "worse", -0.25},
		{"equal", scale(1), "null", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Paired(base, tt.cand)
			if err != nil {
				t.Fatal(err)
			}
			if s.Verdict != tt.verdict || math.Abs(s.Effect-tt.effect) > 1e-9 || s.Seeds != 20 {
				t.Fatalf("%+v: want verdict %s, effect %v over 20 seeds", s, tt.verdict, tt.effect)
			}
		})
	}
	s, err := Paired(map[uint64]float64{1: 1, 2: math.Inf(1), 3: 2, 4: 3}, map[uint64]float64{1: 0.5, 2: 1, 3: math.NaN(), 5: 1})
	if err != nil || s.Seeds != 1 {
		t.Fatalf("%+v, %v: want the one seed both have with finite values", s, err)
	}
	s, err = Paired(map[uint64]float64{1: 1}, map[uint64]float64{2: 1})
	if err != nil || s.Seeds != 0 || s.Verdict != "null" || s.PBetter != 1 || s.PWorse != 1 {
		t.Fatalf("%+v, %v: no common seed is a null result", s, err)
	}
}

func TestScore(t *testing.T) {
	cell := func(sim float64, ok bool) Cell {
		return Cell{Arm: "a", Verdicts: []Verdict{{Metric: "ttft_p95", Real: 1, Sim: sim, Tolerance: 0.15, OK: ok}, {Metric: "hit_rate", Real: 0.9, Sim: 0.89, RelErr: -0.01, Tolerance: 0.02, OK: true}},
			Facts:   map[string]FactPair{"request_share": {Real: []float64{0.6, 0.4}, Sim: []float64{0.55, 0.45}}},
			Medians: map[string]Pair{}}
	}
	perfect := Report{Cells: []Cell{cell(1, true)}}
	s := perfect.Score()
	// hit rate (-0.01/0.02)^2 = 0.25, share (-0.05/0.05)^2 = 1.
	if math.Abs(s.Loss-1.25) > 1e-12 || s.Failed != 0 {
		t.Fatalf("%+v: want loss 1.25, nothing failed", s)
	}
	off := Report{Cells: []Cell{cell(1.3, false)},
		Ordering: map[string]Ordering{"x": {Discordant: [][2]string{{"a", "b"}}}},
		Effects:  []Effect{{SameSign: false, SameVerdict: true}}}
	s = off.Score()
	want := 1.25 + math.Pow(math.Log(1.3)/0.15, 2) + 2*2
	if math.Abs(s.Loss-want) > 1e-9 || s.Failed != 1 || s.Discordant != 1 || s.EffectMismatch != 1 {
		t.Fatalf("%+v: want loss %v, 1 failed, 1 discordant, 1 mismatch", s, want)
	}
	nan := Report{Cells: []Cell{cell(math.NaN(), false)}}
	if s := nan.Score(); s.Loss < 100 {
		t.Fatalf("a NaN metric must weigh: %+v", s)
	}
}
