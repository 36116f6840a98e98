package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"strings"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// WriteJSON writes the report as indented JSON (NaN and infinities as null).
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(sanitize(r))
}

// WriteText writes the report for a person: per arm, real beside simulated
// with the tolerance verdicts and engine facts; then the orderings, the
// paired effects and the rank correlations.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("# Replay: the measured cells beside their simulation\n\n")
	fmt.Fprintf(&b, "Replay of %d measured cells through the shipped picker on the simulated fleet (%.1f s).\n", len(r.Cells), r.Elapsed)
	if r.Source != "" {
		fmt.Fprintf(&b, "Data: %s\n", r.Source)
	}
	b.WriteString("\nMedians over seeds, real -> simulated (relative error; * outside tolerance):\n\n")
	cols := []string{capture.TTFTP50, capture.TTFTP95, capture.TTFTP99, capture.ITLP95, capture.E2EP95, capture.ReqS, capture.ImbalanceKey}
	fmt.Fprintf(&b, "| arm | %s | hit rate |\n|---|%s---|\n", strings.Join(cols, " | "), strings.Repeat("---|", len(cols)))
	for _, c := range r.Cells {
		fmt.Fprintf(&b, "| %s |", c.Arm)
		for _, m := range cols {
			fmt.Fprintf(&b, " %s |", cellText(c, m))
		}
		hv := verdictOf(c, "hit_rate")
		fmt.Fprintf(&b, " %.3f -> %.3f (%+.3f)%s |\n", c.HitRate.Real, c.HitRate.Sim, c.HitRate.Sim-c.HitRate.Real, star(hv))
	}
	fails := 0
	for _, c := range r.Cells {
		for _, v := range c.Verdicts {
			if !v.OK {
				fails++
			}
		}
	}
	fmt.Fprintf(&b, "\n%d of %d tolerance checks outside (TTFT p95, req/s, imbalance 15%%; TTFT p50/p99, ITL p95, e2e p95 25%%; hit rate 0.02).\n",
		fails, len(r.Cells)*(len(Tolerances)+1))

	b.WriteString("\nEngine facts, real -> simulated (engines busiest first):\n\n| arm | request share | waiting share | preemptions | KV usage max | CPU tier GiB | engine TTFT mean s | share of ITL gaps > 80 ms |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range r.Cells {
		f := c.Facts
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %.3f -> %.3f |\n", c.Arm,
			facts(f["request_share"], 1, "%.3f"), facts(f["waiting_share"], 1, "%.3f"), facts(f["preemptions"], 1, "%.0f"),
			facts(f["kv_usage_max"], 1, "%.2f"), facts(f["cpu_tier_bytes"], 1<<30, "%.2f"), facts(f["engine_ttft_mean"], 1, "%.3f"),
			c.Medians[capture.ITLStall].Real, c.Medians[capture.ITLStall].Sim)
	}

	for _, m := range OrderedMetrics {
		o := r.Ordering[m]
		fmt.Fprintf(&b, "\nOrdering on %s (lowest first): real %s; simulated %s; %d discordant pair(s)", m, strings.Join(o.Real, " < "), strings.Join(o.Sim, " < "), len(o.Discordant))
		if len(o.Discordant) > 0 {
			var ps []string
			for _, p := range o.Discordant {
				ps = append(ps, p[0]+"/"+p[1])
			}
			fmt.Fprintf(&b, ": %s", strings.Join(ps, ", "))
		}
		b.WriteString(".\n")
	}
	if len(r.Effects) > 0 {
		fmt.Fprintf(&b, "\nPaired effects against %s (median reduction over seeds, > 0 better; one-sided exact Wilcoxon, p < %g):\n\n| arm | metric | real | simulated | same sign | same verdict |\n|---|---|---|---|---|---|\n", r.Baseline, stats.Alpha)
		for _, e := range r.Effects {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", e.Arm, e.Metric, side(e.Real), side(e.Sim), yes(e.SameSign), yes(e.SameVerdict))
		}
	}
	b.WriteString("\nPer-seed rank correlation (Spearman) of real and simulated values:\n\n| arm | TTFT p95 | imbalance | req/s |\n|---|---|---|---|\n")
	for _, c := range r.Cells {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %.2f |\n", c.Arm, c.RankCorr[capture.TTFTP95], c.RankCorr[capture.ImbalanceKey], c.RankCorr[capture.ReqS])
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func cellText(c Cell, m string) string {
	p := c.Medians[m]
	v := verdictOf(c, m)
	return fmt.Sprintf("%s -> %s (%+.0f%%)%s", num(p.Real), num(p.Sim), 100*(p.Sim/p.Real-1), star(v))
}

func num(x float64) string {
	switch {
	case math.IsNaN(x):
		return "n/a"
	case math.Abs(x) >= 10:
		return fmt.Sprintf("%.2f", x)
	}
	return fmt.Sprintf("%.3f", x)
}

func verdictOf(c Cell, m string) *Verdict {
	for i := range c.Verdicts {
		if c.Verdicts[i].Metric == m {
			return &c.Verdicts[i]
		}
	}
	return nil
}

func star(v *Verdict) string {
	if v != nil && !v.OK {
		return " *"
	}
	return ""
}

func facts(f FactPair, scale float64, format string) string {
	list := func(v []float64) string {
		var s []string
		for _, x := range v {
			s = append(s, fmt.Sprintf(format, x/scale))
		}
		return strings.Join(s, "/")
	}
	return list(f.Real) + " -> " + list(f.Sim)
}

func side(s Side) string {
	return fmt.Sprintf("%+.1f%% %s (p %.4f, %d/%d seeds)", 100*s.Effect, s.Verdict, math.Min(s.PBetter, s.PWorse), s.Improved, s.Seeds)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// sanitize turns the report into plain JSON values, with NaN and
// infinities (which JSON cannot carry) as null.
func sanitize(v any) any { return plain(reflect.ValueOf(v)) }

func plain(v reflect.Value) any {
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if !stats.Finite(f) {
			return nil
		}
		return f
	case reflect.Int, reflect.Int64, reflect.Int32:
		return v.Int()
	case reflect.Uint64, reflect.Uint32, reflect.Uint:
		return v.Uint()
	case reflect.String:
		return v.String()
	case reflect.Bool:
		return v.Bool()
	case reflect.Slice, reflect.Array:
		if v.Kind() == reflect.Slice && v.IsNil() {
			return []any{}
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = plain(v.Index(i))
		}
		return out
	case reflect.Map:
		out := make(map[string]any, v.Len())
		for _, k := range v.MapKeys() {
			out[fmt.Sprint(k.Interface())] = plain(v.MapIndex(k))
		}
		return out
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return plain(v.Elem())
	case reflect.Struct:
		out := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fv := v.Field(i)
			if strings.Contains(opts, "omitempty") && fv.IsZero() {
				continue
			}
			out[name] = plain(fv)
		}
		return out
	}
	return nil
}
