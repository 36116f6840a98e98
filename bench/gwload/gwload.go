// Package gwload measures the highest rate the gateway and the picker sustain with small
// added latency: a live stack (bench/stack) of near-instant engines, one-at-a-time requests
// first (the unloaded round trip), then open-loop Poisson rates in turn, each reported by
// the gateway's own account of the time it added.
package gwload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/openai"
	"github.com/loadaware/loadaware-epp/bench/stack"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

// Config is one gwload run.
type Config struct {
	Rates      []float64     // open-loop rates tried in turn, requests/s
	Duration   time.Duration // send window per rate
	Sequential int           // one-at-a-time requests measured first
	BodyBytes  int           // request body size (at least 64)
	Prompt     string        // "text" (routed on load alone) or "ids" (the policy runs)
	Engines    int           // near-instant engines behind the gateway
	Policy     string        // the picker's policy
	Mode       string        // ext_proc body mode: full-duplex or buffered
	Limit      time.Duration // a rate passes when the p99 added latency stays under it
	Seed       uint64        // arrival-time seed
}

// check says which setting is out of range, by its flag name.
func (c Config) check() error {
	if c.Duration <= 0 || c.Sequential < 0 || c.BodyBytes < 64 || c.Engines < 1 || c.Limit <= 0 || len(c.Rates) == 0 {
		return errors.New("-rates, -duration, -engines and -p99-limit must be positive, -sequential not negative, -body-bytes at least 64")
	}
	if c.Prompt != "text" && c.Prompt != "ids" {
		return fmt.Errorf("-prompt %q: use text or ids", c.Prompt)
	}
	return nil
}

// step is one measured step: the sequential baseline or one rate.
type step struct {
	label    string
	rate     float64 // offered; 0 for the sequential step
	sent     int
	failed   int
	achieved float64 // answers per second over the step
	added    []float64
	picker   []float64
}

// Run starts the stack, measures every step and writes the report to stdout; the stack's
// errors go to stderr.
func Run(ctx context.Context, c Config, stdout, stderr io.Writer) error {
	if err := c.check(); err != nil {
		return err
	}
	mode, err := gateway.ParseBodyMode(c.Mode)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var mu sync.Mutex
	var outcomes []gateway.Outcome
	s, err := stack.Start(ctx, stack.Config{Engines: c.Engines, Policy: c.Policy, Beta: 1, Mode: mode, Log: quiet,
		OnOutcome: func(o gateway.Outcome) {
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		}})
	if err != nil {
		return err
	}
	defer s.Close()
	take := func() []gateway.Outcome {
		s.Gateway.Wait()
		mu.Lock()
		defer mu.Unlock()
		out := outcomes
		outcomes = nil
		return out
	}

	body := openai.PaddedCompletion(c.BodyBytes, c.Prompt == "ids")
	client := openai.Client{HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}}, BaseURL: s.URL}
	defer client.HTTP.CloseIdleConnections()
	post := func(ctx context.Context) error {
		_, err := client.Post(ctx, "/v1/completions", body, false, nil)
		return err
	}

	fmt.Fprintf(stdout, "gwload: gateway (%s ext_proc) + picker (%s, in-process, plaintext loopback) + %d near-instant engines (bench/sim, 10,000x faster); %d-byte bodies (%s prompt).\n",
		mode, c.Policy, c.Engines, len(body), c.Prompt)
	fmt.Fprintf(stdout, "Added latency = the gateway's time for a request minus the engine's (request sent to body read); the load\n")
	fmt.Fprintf(stdout, "generator shares the machine's CPUs with the gateway and the picker.\n\n")

	var steps []step
	if c.Sequential > 0 {
		st := step{label: "sequential"}
		start := time.Now()
		for range c.Sequential {
			if err := post(ctx); err != nil {
				st.failed++
			}
			st.sent++
		}
		st.achieved = float64(st.sent-st.failed) / time.Since(start).Seconds()
		st.fill(take())
		steps = append(steps, st)
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))
	for _, rate := range c.Rates {
		st := step{label: fmt.Sprintf("%.0f req/s", rate), rate: rate}
		var wg sync.WaitGroup
		var fails sync.Mutex
		start := time.Now()
		at := time.Duration(0)
		for at < c.Duration && ctx.Err() == nil {
			if d := time.Until(start.Add(at)); d > 0 {
				time.Sleep(d)
			}
			st.sent++
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := post(ctx); err != nil {
					fails.Lock()
					st.failed++
					fails.Unlock()
				}
			}()
			at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		}
		wg.Wait()
		st.achieved = float64(st.sent-st.failed) / time.Since(start).Seconds()
		st.fill(take())
		steps = append(steps, st)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	inflight, err := s.InFlight(ctx)
	if err != nil {
		return err
	}
	report(stdout, steps, c.Limit, inflight)
	return nil
}

func (st *step) fill(os []gateway.Outcome) {
	for _, o := range os {
		if o.Err != "" {
			continue
		}
		st.added = append(st.added, ms(o.Added()))
		st.picker = append(st.picker, ms(o.PickerTime))
	}
}

func report(w io.Writer, steps []step, limit time.Duration, inflight float64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tsent\tfailed\tanswered/s\tadded p50 ms\tp99\text_proc round trip p50 ms\tp99\tp99 added < limit\t")
	best := 0.0
	for _, st := range steps {
		a, p := stats.Percentiles(st.added, 50, 99), stats.Percentiles(st.picker, 50, 99)
		pass := st.failed == 0 && a[1] < ms(limit)
		if pass && st.rate > 0 && st.achieved > best {
			best = st.achieved
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t%v\t\n", st.label, st.sent, st.failed, st.achieved,
			f2(a[0]), f2(a[1]), f2(p[0]), f2(p[1]), pass)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\n(ext_proc round trip: request headers sent to the picker's answer, which it holds until the body has arrived.)")
	if best > 0 {
		fmt.Fprintf(w, "Highest rate sustained with p99 added latency under %v and no failures: %.0f req/s.\n", limit, best)
	} else {
		fmt.Fprintf(w, "No rate kept the p99 added latency under %v without failures.\n", limit)
	}
	fmt.Fprintf(w, "The picker's in-flight count at the end: %v.\n", inflight)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// f2 prints v with two decimals, "-" for NaN (no sample).
func f2(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
