package tournament

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/plot"
	"github.com/loadaware/loadaware-epp/bench/vtime"
)

// The knee report runs one profile at every point of an offered-load ladder
// and reports, per arm and point, TTFT p90 and input tokens per second, as
// llm-d reports its router benchmarks; the knee is where TTFT p90 leaves its
// floor.

// KneeHeadroom is how far past the fleet's measured capacity a scaled
// ladder's top point goes, so the knee falls inside the ladder.
const KneeHeadroom = 1.25

// KneeFactor defines the knee: an arm's TTFT p90 has left its floor (its
// value at the ladder's lowest point) once it exceeds KneeFactor times it.
const KneeFactor = 2

// CapacityOverload is how far past the profile's own rate the capacity run
// offers load, at the least (see Capacity).
const CapacityOverload = 10

// CapacityArm routes the capacity run: no cache preference, so the figure
// favours no arm.
var CapacityArm = experiment.Arm{Name: "leastload", Policy: "leastload"}

// ScaleLadder returns the rates a ladder runs at on a fleet of the given
// capacity (requests per second): published unchanged when its top is
// within capacity, else every point times scale = KneeHeadroom * capacity /
// top, rounded to 3 significant digits, so the shape of the published ladder
// is kept and its top is KneeHeadroom times the capacity.
func ScaleLadder(published []float64, capacity float64) (rates []float64, scale float64) {
	top := published[len(published)-1]
	if top <= capacity {
		return append([]float64(nil), published...), 1
	}
	scale = KneeHeadroom * capacity / top
	for _, r := range published {
		rates = append(rates, round3(r*scale))
	}
	return rates, scale
}

func round3(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 3, 64), 64)
	return v
}

// LadderProfiles returns prof once per rate, each named "<name>@<rate>"
// with its workload's rate set to the point.
func LadderProfiles(prof Profile, rates []float64) []Profile {
	out := make([]Profile, len(rates))
	for i, r := range rates {
		p := prof
		p.Name = prof.Name + "@" + strconv.FormatFloat(r, 'g', -1, 64)
		p.Fleet.Workload.Rate = r
		p.About = fmt.Sprintf("%s at %g req/s offered", prof.About, r)
		out[i] = p
	}
	return out
}

// Capacity measures the requests per second prof's fleet completes when
// offered more than it can take: one cell of CapacityArm on seed 1 at
// offered req/s under the published cell protocol, capacity = the seed's
// req_s (completed requests over the span from the first send to the last
// completion). It is an error when the fleet kept up (req_s above 90% of
// offered): the run was not past capacity, so pass a higher rate.
func Capacity(ctx context.Context, prof Profile, offered float64, sample time.Duration) (float64, error) {
	p := prof
	p.Fleet.Workload.Rate = offered
	cfg := Config{Profiles: []Profile{p}, Arms: []experiment.Arm{CapacityArm}, Seeds: []uint64{1}, SampleInterval: sample, Workers: 1}
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	seeds, err := cellSeeds(p, cfg.Seeds)
	if err != nil {
		return 0, err
	}
	cc := vtime.CellConfig{Sweep: p.Fleet, Arm: CapacityArm, Seeds: seeds, SampleInterval: sample, Warmup: p.Trace == nil}
	cc.Sweep.Arms, cc.Sweep.Seeds = cfg.Arms, cfg.Seeds
	cr, err := vtime.RunCell(ctx, cc)
	if err != nil {
		return 0, err
	}
	res, err := seedResults(p.Name+"/capacity", cr)
	if err != nil {
		return 0, err
	}
	got := capture.Metric(res.Seeds[0].Metrics, capture.ReqS)
	switch {
	case !(got > 0):
		return 0, fmt.Errorf("capacity run at %g req/s completed no request", offered)
	case got > 0.9*offered:
		return 0, fmt.Errorf("capacity run at %g req/s completed %.3g req/s: the fleet kept up, so this is not its capacity; offer more", offered, got)
	}
	return got, nil
}

// Knee says how a ladder was chosen, for the report.
type Knee struct {
	Name      string    // the profile
	Source    string    // where the workload and its ladder were published ("" omits it)
	Published []float64 // the published ladder (nil when the rates were given)
	Rates     []float64 // the rates run, one per Result profile in order
	Scale     float64   // Rates over Published (1 when not scaled)
	Capacity  float64   // the fleet's measured capacity, req/s
	Offered   float64   // the capacity run's offered rate, req/s
}

// KneePoint is one arm's knee: the highest rate before its TTFT p90 first
// exceeds KneeFactor times its floor.
type KneePoint struct {
	Floor     float64 // TTFT p90 at the lowest rate, seconds (median over seeds)
	Rate      float64 // the knee's offered rate; NaN when the lowest rate already left the floor (no floor measured)
	InputTokS float64 // input tokens/s at the knee
	Beyond    bool    // TTFT p90 never left the floor: the knee is past the ladder's top
}

// Knees returns each arm's knee over res, whose profiles are the ladder's
// points in ascending rate order (rates).
func Knees(res Result, rates []float64) []KneePoint {
	if len(res.Profiles) == 0 {
		return nil
	}
	out := make([]KneePoint, len(res.Profiles[0].Arms))
	for a := range out {
		k := KneePoint{Floor: res.Profiles[0].Arms[a].Median(capture.TTFTP90), Rate: math.NaN(), InputTokS: math.NaN(), Beyond: true}
		for i, p := range res.Profiles {
			v := p.Arms[a].Median(capture.TTFTP90)
			if math.IsNaN(v) || v > KneeFactor*k.Floor {
				k.Beyond = false
				break
			}
			k.Rate, k.InputTokS = rates[i], p.Arms[a].Median(InputTokSKey)
		}
		out[a] = k
	}
	return out
}

// WriteKnee writes the knee report: how the ladder was chosen (and scaled),
// a table of TTFT p90 and input tokens/s per offered rate and arm (medians
// over seeds), and each arm's knee. res's profiles are k.Rates in order.
func WriteKnee(w io.Writer, res Result, k Knee, opt ReportOptions) error {
	if len(res.Profiles) != len(k.Rates) || len(res.Profiles) == 0 {
		return fmt.Errorf("knee report: %d ladder points and %d results: want one result per point", len(k.Rates), len(res.Profiles))
	}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, "# Knee: %s\n\n", k.Name)
	if opt.Command != "" {
		fmt.Fprintf(b, "Produced by `%s`.\n\n", opt.Command)
	}
	if k.Source != "" {
		fmt.Fprintf(b, "Workload and ladder: %s\n\n", strings.TrimSpace(k.Source))
	}
	fmt.Fprintf(b, "%s\n\n", FleetText(res.Profiles[0].Profile))
	fmt.Fprintf(b, "The fleet's measured capacity is %.3g req/s: `%s` offered %g req/s (seed 1, the published cell protocol) completed that many per second from its first send to its last completion.\n\n", k.Capacity, CapacityArm.Name, k.Offered)
	switch {
	case k.Published == nil:
		fmt.Fprintf(b, "The ladder was given: %s req/s.\n\n", joinRates(k.Rates))
	case k.Scale == 1:
		fmt.Fprintf(b, "The published ladder (%s req/s) is within the fleet's capacity and runs as published.\n\n", joinRates(k.Published))
	default:
		fmt.Fprintf(b, "**The published ladder (%s req/s) exceeds this fleet's capacity**, so every point is scaled by %.4g (its top becomes %gx the capacity) and rounded to 3 digits: %s req/s.\n\n",
			joinRates(k.Published), k.Scale, KneeHeadroom, joinRates(k.Rates))
	}
	fmt.Fprintf(b, "Each point runs every arm on seeds %s (%s). Medians over seeds.\n\n", strings.TrimPrefix(seedText(res.Seeds), "seeds "), fmt.Sprintf("%d requests per seed", res.Profiles[0].Profile.Fleet.Workload.Requests))
	b.WriteString("| offered req/s |")
	if k.Published != nil {
		b.WriteString(" published |")
	}
	arms := res.Profiles[0].Arms
	for _, a := range arms {
		fmt.Fprintf(b, " %s TTFT p90 (s) | %s input tok/s |", a.Arm.Name, a.Arm.Name)
	}
	b.WriteString("\n|---|")
	if k.Published != nil {
		b.WriteString("---|")
	}
	b.WriteString(strings.Repeat("---|---|", len(arms)) + "\n")
	for i, p := range res.Profiles {
		fmt.Fprintf(b, "| %g |", k.Rates[i])
		if k.Published != nil {
			fmt.Fprintf(b, " %g |", k.Published[i])
		}
		for _, a := range p.Arms {
			fmt.Fprintf(b, " %s | %s |", num(a.Median(capture.TTFTP90), 3), num(a.Median(InputTokSKey), 0))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "\nThe knee is the highest offered rate before an arm's TTFT p90 first exceeds %dx its floor (its TTFT p90 at the lowest rate):\n\n", KneeFactor)
	b.WriteString("| arm | TTFT p90 floor (s) | knee (req/s) | input tok/s at the knee |\n|---|---|---|---|\n")
	for i, kp := range Knees(res, k.Rates) {
		rate := num(kp.Rate, 3)
		if kp.Beyond {
			rate = "past " + strconv.FormatFloat(k.Rates[len(k.Rates)-1], 'g', -1, 64)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s |\n", arms[i].Arm.Name, num(kp.Floor, 3), rate, num(kp.InputTokS, 0))
	}
	if opt.Figure != "" {
		fmt.Fprintf(b, "\n![TTFT p90 against offered load](%s)\n", opt.Figure)
	}
	if opt.JSON != "" {
		fmt.Fprintf(b, "\nEvery seed's metrics, one profile per point: [%s](%s).\n", opt.JSON, opt.JSON)
	}
	return b.Flush()
}

func joinRates(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.FormatFloat(r, 'g', -1, 64)
	}
	return strings.Join(parts, ", ")
}

// WriteKneeFiles writes the knee report to out, the TTFT p90 figure beside
// it (same name, .png) and, with jsonOut, the ladder's JSON results (one
// profile per point, as WriteJSON writes them).
func WriteKneeFiles(res Result, k Knee, out, jsonOut, command string) error {
	var series []plot.Series
	for a, arm := range res.Profiles[0].Arms {
		s := plot.Series{Name: arm.Arm.Name, X: k.Rates}
		for _, p := range res.Profiles {
			s.Y = append(s.Y, p.Arms[a].Median(capture.TTFTP90))
		}
		series = append(series, s)
	}
	return writeFiles(res, out, jsonOut, command, func(fig string) error {
		return plot.Lines(fig, plot.Axes{Title: k.Name + ": TTFT p90 against offered load", X: "offered req/s", Y: "TTFT p90 (s)"}, series)
	}, func(w io.Writer, opt ReportOptions) error { return WriteKnee(w, res, k, opt) })
}
