package extload

import (
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/loadaware/loadaware-epp/bench/stats"
)

// Arm is one server's window at one rate, with the CPU time its process used over it.
type Arm struct {
	Server string
	Rate   float64
	Window Window
	CPU    time.Duration
}

// CPUPerRequest is the server's CPU time over the window divided by the streams opened.
func (a Arm) CPUPerRequest() time.Duration {
	if a.Window.Sent == 0 {
		return 0
	}
	return a.CPU / time.Duration(a.Window.Sent)
}

// Quantiles returns the p-th percentiles of the full stream round trips, in milliseconds.
func (a Arm) Quantiles(ps ...float64) []float64 { return millis(a.Window.Totals, ps...) }

// DecisionQuantiles returns the p-th percentiles of the request phases, in milliseconds.
func (a Arm) DecisionQuantiles(ps ...float64) []float64 { return millis(a.Window.Choices, ps...) }

func millis(ds []time.Duration, ps ...float64) []float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d) / float64(time.Millisecond)
	}
	return stats.Percentiles(xs, ps...)
}

// Pool adds a to arms: to the arm of the same server and rate if there is one (its
// windows' counts, round trips and CPU summed), else as a new arm at the end.
func Pool(arms []Arm, a Arm) []Arm {
	for i := range arms {
		if p := &arms[i]; p.Server == a.Server && p.Rate == a.Rate {
			w := &p.Window
			w.Sent += a.Window.Sent
			w.Shed += a.Window.Shed
			w.Failed += a.Window.Failed
			w.Routed += a.Window.Routed
			w.Elapsed += a.Window.Elapsed
			w.Totals = append(w.Totals, a.Window.Totals...)
			w.Choices = append(w.Choices, a.Window.Choices...)
			for msg, n := range a.Window.Errors {
				if w.Errors == nil {
					w.Errors = map[string]int{}
				}
				w.Errors[msg] += n
			}
			p.CPU += a.CPU
			return arms
		}
	}
	return append(arms, a)
}

// Comparison is a server against the floor at one rate.
type Comparison struct {
	Rate                 float64
	P50Ratio, P99Ratio   float64       // server / floor, full stream round trip
	CPUExtra             time.Duration // server's CPU per request minus the floor's
	CPURatio             float64
	ServerFailed, Routed int
}

// Compare pairs every arm of server with the floor's arm at the same rate, in rate order.
func Compare(arms []Arm, server, floor string) []Comparison {
	byRate := map[float64]map[string]Arm{}
	for _, a := range arms {
		if byRate[a.Rate] == nil {
			byRate[a.Rate] = map[string]Arm{}
		}
		byRate[a.Rate][a.Server] = a
	}
	var out []Comparison
	for rate, m := range byRate {
		s, ok1 := m[server]
		f, ok2 := m[floor]
		if !ok1 || !ok2 {
			continue
		}
		sq, fq := s.Quantiles(50, 99), f.Quantiles(50, 99)
		c := Comparison{Rate: rate, P50Ratio: sq[0] / fq[0], P99Ratio: sq[1] / fq[1],
			CPUExtra: s.CPUPerRequest() - f.CPUPerRequest(), ServerFailed: s.Window.Failed, Routed: s.Window.Routed}
		if f.CPUPerRequest() > 0 {
			c.CPURatio = float64(s.CPUPerRequest()) / float64(f.CPUPerRequest())
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rate < out[j].Rate })
	return out
}

// WriteReport writes the arms' distributions and, for each floor in turn, the comparisons
// of server with it. p99Target and cpuTarget are the ratio and the added CPU per request a
// rate must stay within to be marked as meeting them.
func WriteReport(w io.Writer, arms []Arm, server string, floors []string, p99Target float64, cpuTarget time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rate/s\tserver\tsent\tshed\tfailed\trouted\tround trip p50 ms\tp99\tp99.9\trequest phase p50 ms\tp99\tCPU/request µs\t")
	for _, a := range arms {
		q, d := a.Quantiles(50, 99, 99.9), a.DecisionQuantiles(50, 99)
		fmt.Fprintf(tw, "%.0f\t%s\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t\n", a.Rate, a.Server, a.Window.Sent, a.Window.Shed,
			a.Window.Failed, a.Window.Routed, q[0], q[1], q[2], d[0], d[1], float64(a.CPUPerRequest())/float64(time.Microsecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, floor := range floors {
		fmt.Fprintf(w, "\n%s against %s, same run:\n", server, floor)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "rate/s\tp50 ratio\tp99 ratio\tp99 <= %.2gx\tCPU/request ratio\textra CPU/request µs\textra <= %v\t\n", p99Target, cpuTarget)
		for _, c := range Compare(arms, server, floor) {
			fmt.Fprintf(tw, "%.0f\t%.2f\t%.2f\t%v\t%.2f\t%.1f\t%v\t\n", c.Rate, c.P50Ratio, c.P99Ratio, c.P99Ratio <= p99Target,
				c.CPURatio, float64(c.CPUExtra)/float64(time.Microsecond), c.CPUExtra <= cpuTarget)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	for _, a := range arms {
		for msg, n := range a.Window.Errors {
			fmt.Fprintf(w, "%s at %.0f/s: %d x %s\n", a.Server, a.Rate, n, msg)
		}
	}
	return nil
}
