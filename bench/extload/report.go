package extload

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
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
	// The server's collector over the window: its CPU time (the runtime's estimate, part
	// of CPU), its cycles, and the bytes the server allocated.
	GCCPU      time.Duration
	GCs        uint64
	AllocBytes uint64
	// GeneratorCPU is the CPU time the load generator's process used over the window:
	// near its CPUs' whole share, the generator, not the server, sets the round trips.
	GeneratorCPU time.Duration
	// Rounds are the round trips of each window pooled into Window, in the order pooled
	// (by Pool); nil for an arm of one window never pooled.
	Rounds [][]time.Duration
}

// rounds is a's windows' round trips: Rounds, or Window's alone.
func (a Arm) rounds() [][]time.Duration {
	if a.Rounds != nil {
		return a.Rounds
	}
	return [][]time.Duration{a.Window.Totals}
}

// CPUPerRequest is the server's CPU time over the window divided by the streams opened.
func (a Arm) CPUPerRequest() time.Duration {
	if a.Window.Sent == 0 {
		return 0
	}
	return a.CPU / time.Duration(a.Window.Sent)
}

// GeneratorLoad is the generator's CPU time over the window's elapsed time: 1 is one
// CPU's whole time.
func (a Arm) GeneratorLoad() float64 {
	if a.Window.Elapsed <= 0 {
		return 0
	}
	return float64(a.GeneratorCPU) / float64(a.Window.Elapsed)
}

// Quantiles returns the p-th percentiles of the full stream round trips, in milliseconds.
func (a Arm) Quantiles(ps ...float64) []float64 { return millis(a.Window.Totals, ps...) }

// DecisionQuantiles returns the p-th percentiles of the request phases, in milliseconds.
func (a Arm) DecisionQuantiles(ps ...float64) []float64 { return millis(a.Window.Choices, ps...) }

func millis(ds []time.Duration, ps ...float64) []float64 {
	return stats.Percentiles(inMillis(ds), ps...)
}

// inMillis is ds in milliseconds.
func inMillis(ds []time.Duration) []float64 {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d) / float64(time.Millisecond)
	}
	return xs
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
			p.GeneratorCPU += a.GeneratorCPU
			p.GCCPU += a.GCCPU
			p.GCs += a.GCs
			p.AllocBytes += a.AllocBytes
			p.Rounds = append(p.rounds(), a.rounds()...)
			return arms
		}
	}
	a.Rounds = a.rounds()
	return append(arms, a)
}

// Comparison is a server against the floor at one rate.
type Comparison struct {
	Rate               float64
	P50Ratio, P99Ratio float64 // server / floor, full stream round trip
	// P99CI is the percentile bootstrap interval of P99Ratio over the rounds, at
	// CILevel: each resample draws rounds with replacement and pools the same rounds'
	// windows of both servers (a round's windows ran one after the other, so the
	// machine's drift between rounds falls on both alike). Set only when both arms have
	// the same number of rounds, at least MinCIRounds.
	P99CI                stats.Interval
	HasCI                bool
	CPUExtra             time.Duration // server's CPU per request minus the floor's
	CPURatio             float64
	ServerFailed, Routed int
}

// The rounds' bootstrap: its coverage, resamples, and the fewest rounds it is drawn from.
const (
	CILevel     = 0.90
	ciResamples = 1000
	MinCIRounds = 3
)

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
		c.P99CI, c.HasCI = p99RatioCI(s.rounds(), f.rounds(), uint64(rate))
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
	fmt.Fprintln(tw, "rate/s\tserver\tsent\tshed\tfailed\trouted\tround trip p50 ms\tp99\tp99.9\trequest phase p50 ms\tp99\tCPU/request µs\tGC CPU/request µs\tGCs/s\talloc KB/request\tgenerator CPU/request µs\tgenerator load\t")
	for _, a := range arms {
		q, d := a.Quantiles(50, 99, 99.9), a.DecisionQuantiles(50, 99)
		perRequest := func(x float64) float64 {
			if a.Window.Sent == 0 {
				return 0
			}
			return x / float64(a.Window.Sent)
		}
		var gcRate float64
		if a.Window.Elapsed > 0 {
			gcRate = float64(a.GCs) / a.Window.Elapsed.Seconds()
		}
		µs := float64(time.Microsecond)
		fmt.Fprintf(tw, "%.0f\t%s\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f%%\t\n", a.Rate, a.Server, a.Window.Sent, a.Window.Shed,
			a.Window.Failed, a.Window.Routed, q[0], q[1], q[2], d[0], d[1], float64(a.CPUPerRequest())/µs,
			perRequest(float64(a.GCCPU))/µs, gcRate, perRequest(float64(a.AllocBytes))/1024,
			perRequest(float64(a.GeneratorCPU))/µs, 100*a.GeneratorLoad())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, floor := range floors {
		fmt.Fprintf(w, "\n%s against %s, same run:\n", server, floor)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "rate/s\tp50 ratio\tp99 ratio\tp99 <= %.2gx\tp99 ratio %.0f%% CI\tCI within\tCPU/request ratio\textra CPU/request µs\textra <= %v\t\n",
			p99Target, 100*CILevel, cpuTarget)
		for _, c := range Compare(arms, server, floor) {
			ci, within := "-", "-"
			if c.HasCI {
				ci = fmt.Sprintf("%.2f-%.2f", c.P99CI.Lo, c.P99CI.Hi)
				within = ciVerdict(c.P99CI, p99Target)
			}
			fmt.Fprintf(tw, "%.0f\t%.2f\t%.2f\t%v\t%s\t%s\t%.2f\t%.1f\t%v\t\n", c.Rate, c.P50Ratio, c.P99Ratio, c.P99Ratio <= p99Target,
				ci, within, c.CPURatio, float64(c.CPUExtra)/float64(time.Microsecond), c.CPUExtra <= cpuTarget)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\nCI: the p99 ratio's %.0f%% bootstrap interval over the rounds (each resample pools the same rounds of both\n", 100*CILevel)
	fmt.Fprintf(w, "servers); \"unclear\" means it straddles the target: this machine's noise hides the answer; run more -rounds.\n")
	fmt.Fprintf(w, "It needs at least %d rounds (\"-\" with fewer).\n", MinCIRounds)
	for _, a := range arms {
		for msg, n := range a.Window.Errors {
			fmt.Fprintf(w, "%s at %.0f/s: %d x %s\n", a.Server, a.Rate, n, msg)
		}
	}
	return nil
}

// ciVerdict says where iv lies against target: "yes" wholly within it, "no" wholly
// above it, "unclear" across it.
func ciVerdict(iv stats.Interval, target float64) string {
	switch {
	case iv.Hi <= target:
		return "yes"
	case iv.Lo > target:
		return "no"
	}
	return "unclear"
}

// p99RatioCI is the bootstrap interval of pooled p99(server) / pooled p99(floor) over
// paired rounds (see Comparison.P99CI); false when the rounds do not pair or are fewer
// than MinCIRounds, or a resample has no round trips.
func p99RatioCI(server, floor [][]time.Duration, seed uint64) (stats.Interval, bool) {
	if len(server) != len(floor) || len(server) < MinCIRounds {
		return stats.Interval{}, false
	}
	ss, fs := sortedRounds(server), sortedRounds(floor)
	idx := make([]float64, len(server))
	for i := range idx {
		idx[i] = float64(i)
	}
	var scratch []float64
	ok := true
	iv, err := stats.BootstrapCI(idx, func(sample []float64) float64 {
		var sp, fp float64
		sp, scratch = pooledPercentile(ss, sample, 99, scratch)
		fp, scratch = pooledPercentile(fs, sample, 99, scratch)
		if math.IsNaN(sp) || math.IsNaN(fp) || fp == 0 {
			ok = false
			return 0
		}
		return sp / fp
	}, CILevel, ciResamples, seed)
	return iv, err == nil && ok
}

// sortedRounds is each round's round trips in milliseconds, ascending.
func sortedRounds(rounds [][]time.Duration) [][]float64 {
	out := make([][]float64, len(rounds))
	for i, r := range rounds {
		out[i] = inMillis(r)
		slices.Sort(out[i])
	}
	return out
}

// pooledPercentile is stats.Percentile(p) of the concatenation of rounds[i] for each i in
// pick (a round drawn twice counts twice), each round sorted ascending. Only the values
// at or above the percentile's lower rank can matter, so it gathers each pick's largest
// that many into scratch (returned for reuse) and sorts those alone.
func pooledPercentile(rounds [][]float64, pick []float64, p float64, scratch []float64) (float64, []float64) {
	n := 0
	for _, i := range pick {
		n += len(rounds[int(i)])
	}
	if n == 0 {
		return math.NaN(), scratch
	}
	pos := p / 100 * float64(n-1)
	lo := int(math.Floor(pos))
	top := n - lo // the values of rank lo and above, in the pooled ascending order
	scratch = scratch[:0]
	for _, i := range pick {
		r := rounds[int(i)]
		scratch = append(scratch, r[max(0, len(r)-top):]...)
	}
	slices.Sort(scratch)
	// scratch holds the pooled sample's largest values (at least top of them), so rank
	// lo of the pool is rank len(scratch)-top of scratch.
	s := scratch[len(scratch)-top:]
	if frac := pos - float64(lo); frac > 0 {
		return s[0] + (s[1]-s[0])*frac, scratch
	}
	return s[0], scratch
}

// WindowStalls is one arm's windows seen one at a time: where the pooled report's tail
// came from.
type WindowStalls struct {
	Server  string
	Rate    float64
	Windows int
	// MedianP99 is the median over the windows of each window's p99 round trip.
	MedianP99 time.Duration
	// Stalled are the windows with a round trip longer than the limit, longest first.
	Stalled []Stall
}

// Stall is a window with a round trip over the limit: its round (0-based, in the order
// pooled) and its longest round trip.
type Stall struct {
	Round   int
	Longest time.Duration
}

// Stalls returns each arm's WindowStalls against limit, in the arms' order.
func Stalls(arms []Arm, limit time.Duration) []WindowStalls {
	out := make([]WindowStalls, 0, len(arms))
	for _, a := range arms {
		ws := WindowStalls{Server: a.Server, Rate: a.Rate}
		var p99s []float64
		for i, r := range a.rounds() {
			if len(r) == 0 {
				continue
			}
			ws.Windows++
			p99s = append(p99s, millis(r, 99)[0])
			if m := slices.Max(r); m > limit {
				ws.Stalled = append(ws.Stalled, Stall{Round: i, Longest: m})
			}
		}
		slices.SortStableFunc(ws.Stalled, func(x, y Stall) int { return cmp.Compare(y.Longest, x.Longest) })
		if len(p99s) > 0 {
			ws.MedianP99 = time.Duration(stats.Percentiles(p99s, 50)[0] * float64(time.Millisecond))
		}
		out = append(out, ws)
	}
	return out
}

// WriteStalls writes Stalls(arms, limit): per server and rate, the median window's p99
// and the windows with a round trip over limit (at most the 8 longest named).
func WriteStalls(w io.Writer, arms []Arm, limit time.Duration) error {
	fmt.Fprintf(w, "\nWindows one at a time (a stall is a round trip over %v):\n", limit)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rate/s\tserver\twindows\tmedian window p99 ms\twindows with a stall\tlongest round trips ms (round)")
	for _, s := range Stalls(arms, limit) {
		var named []string
		for _, st := range s.Stalled[:min(len(s.Stalled), 8)] {
			named = append(named, fmt.Sprintf("%.1f (%d)", float64(st.Longest)/float64(time.Millisecond), st.Round))
		}
		list := strings.Join(named, ", ")
		if list == "" {
			list = "-"
		}
		fmt.Fprintf(tw, "%.0f\t%s\t%d\t%.3f\t%d\t%s\n", s.Rate, s.Server, s.Windows, float64(s.MedianP99)/float64(time.Millisecond), len(s.Stalled), list)
	}
	return tw.Flush()
}

// RoundRatio is a server against a floor at one rate, round by round: each round's window
// p99 of the server over the floor's window p99 in the same round (the two windows ran
// seconds apart, so a host's slow spell falls on both or shows in one round only). Median
// is the median of those ratios; CI is its percentile bootstrap interval over the rounds
// at CILevel, set (HasCI) with at least MinCIRounds pairs. Unlike the pooled p99 ratio,
// whose tail is the worst rounds' stalls, the median is moved by a stall only in a
// majority of rounds.
type RoundRatio struct {
	Rate   float64
	Rounds int // the rounds where both windows had round trips
	Median float64
	CI     stats.Interval
	HasCI  bool
}

// RoundRatios pairs the windows of server and floor round by round at each rate both ran
// the same number of rounds, in rate order.
func RoundRatios(arms []Arm, server, floor string) []RoundRatio {
	var out []RoundRatio
	for _, s := range arms {
		if s.Server != server {
			continue
		}
		i := slices.IndexFunc(arms, func(a Arm) bool { return a.Server == floor && a.Rate == s.Rate })
		if i < 0 || len(arms[i].rounds()) != len(s.rounds()) {
			continue
		}
		var ratios []float64
		for r, sw := range s.rounds() {
			fw := arms[i].rounds()[r]
			if len(sw) == 0 || len(fw) == 0 {
				continue
			}
			if fp := millis(fw, 99)[0]; fp > 0 {
				ratios = append(ratios, millis(sw, 99)[0]/fp)
			}
		}
		if len(ratios) == 0 {
			continue
		}
		rr := RoundRatio{Rate: s.Rate, Rounds: len(ratios), Median: stats.Median(ratios)}
		if len(ratios) >= MinCIRounds {
			iv, err := stats.BootstrapCI(ratios, stats.Median, CILevel, ciResamples, uint64(s.Rate))
			rr.CI, rr.HasCI = iv, err == nil
		}
		out = append(out, rr)
	}
	slices.SortFunc(out, func(x, y RoundRatio) int { return cmp.Compare(x.Rate, y.Rate) })
	return out
}

// WriteRoundRatios writes RoundRatios of server against each floor, with the verdict of
// each interval against p99Target.
func WriteRoundRatios(w io.Writer, arms []Arm, server string, floors []string, p99Target float64) error {
	fmt.Fprintf(w, "\nRound by round: the median over the rounds of %s's window p99 over the floor's in the same round:\n", server)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "rate/s\tfloor\trounds\tmedian round p99 ratio\t%.0f%% CI\tCI within %.2gx\n", 100*CILevel, p99Target)
	for _, floor := range floors {
		for _, r := range RoundRatios(arms, server, floor) {
			ci, within := "-", "-"
			if r.HasCI {
				ci, within = fmt.Sprintf("%.2f-%.2f", r.CI.Lo, r.CI.Hi), ciVerdict(r.CI, p99Target)
			}
			fmt.Fprintf(tw, "%.0f\t%s\t%d\t%.2f\t%s\t%s\n", r.Rate, floor, r.Rounds, r.Median, ci, within)
		}
	}
	return tw.Flush()
}
