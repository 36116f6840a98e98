package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/openai"
	"github.com/loadaware/loadaware-epp/bench/stats"
)

func init() {
	register(command{name: "gwload", summary: "measure the rate the gateway + picker sustain with p99 added latency under a limit", run: runGWLoad})
}

type gwloadConfig struct {
	rates      string
	duration   time.Duration
	sequential int
	bodyBytes  int
	engines    int
	policy     string
	mode       string
	limit      time.Duration
	seed       uint64
	cpuProfile string
	prompt     string
}

func runGWLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c gwloadConfig
	fs := flag.NewFlagSet("gwload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.rates, "rates", "250,500,1000,1500,2000,3000", "open-loop rates to try in turn, requests/s")
	fs.DurationVar(&c.duration, "duration", 2*time.Second, "send window per rate")
	fs.IntVar(&c.sequential, "sequential", 1000, "one-at-a-time requests measured first (the unloaded round trip)")
	fs.IntVar(&c.bodyBytes, "body-bytes", 8192, "request body size")
	fs.StringVar(&c.prompt, "prompt", "text", "prompt form: text (routed on load alone: no tokenizer in-process) or ids (token ids: the policy runs)")
	fs.IntVar(&c.engines, "engines", 2, "near-instant engines (bench/sim with 10,000x shorter steps) behind the gateway")
	fs.StringVar(&c.policy, "policy", "loadaware", "the picker's policy")
	fs.StringVar(&c.mode, "body-mode", "full-duplex", "ext_proc body mode: full-duplex or buffered")
	fs.DurationVar(&c.limit, "p99-limit", 2*time.Millisecond, "a rate passes when the p99 added latency stays under this")
	fs.Uint64Var(&c.seed, "seed", 1, "arrival-time seed")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "loadaware-bench gwload: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "loadaware-bench gwload: start the CPU profile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	if err := gwload(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "loadaware-bench gwload: %v\n", err)
		return 1
	}
	return 0
}

// completionBody returns the body of a whole (not streamed) one-token completion of at least
// n bytes, its prompt text or a list of token ids.
func completionBody(n int, ids bool) []byte {
	body := func(prompt any) []byte {
		b, _ := openai.Request{Model: "load", MaxTokens: 1, Prompt: prompt}.Body()
		return b
	}
	if !ids {
		return body(strings.Repeat("lorem ipsum ", max(n-len(body("")), 0)/12+1))
	}
	toks := make([]int, (max(n-len(body([]int{})), 0)+5)/6) // each id is 5 digits and a comma
	for i := range toks {
		toks[i] = 10000 + i%90000
	}
	return body(toks)
}

// loadStep is one measured step: the sequential baseline or one rate.
type loadStep struct {
	label    string
	rate     float64 // offered; 0 for the sequential step
	sent     int
	failed   int
	achieved float64 // answers per second over the step
	added    []float64
	picker   []float64
}

func gwload(ctx context.Context, c gwloadConfig, stdout, stderr io.Writer) error {
	mode, err := gateway.ParseBodyMode(c.mode)
	if err != nil {
		return err
	}
	rates, err := parseRates(c.rates)
	if err != nil {
		return err
	}
	if c.duration <= 0 || c.sequential < 0 || c.bodyBytes < 64 || c.engines < 1 || c.limit <= 0 {
		return errors.New("-duration, -engines and -p99-limit must be positive, -sequential not negative, -body-bytes at least 64")
	}
	if c.prompt != "text" && c.prompt != "ids" {
		return fmt.Errorf("-prompt %q: use text or ids", c.prompt)
	}
	quiet := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	var mu sync.Mutex
	var outcomes []gateway.Outcome
	s, err := startStack(ctx, stackConfig{engines: c.engines, policy: c.policy, beta: 1, mode: mode, log: quiet,
		onOutcome: func(o gateway.Outcome) {
			mu.Lock()
			outcomes = append(outcomes, o)
			mu.Unlock()
		}})
	if err != nil {
		return err
	}
	defer s.close()
	take := func() []gateway.Outcome {
		mu.Lock()
		defer mu.Unlock()
		out := outcomes
		outcomes = nil
		return out
	}

	body := completionBody(c.bodyBytes, c.prompt == "ids")
	client := openai.Client{HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}}, BaseURL: s.url}
	defer client.HTTP.CloseIdleConnections()
	post := func(ctx context.Context) error {
		_, err := client.Post(ctx, "/v1/completions", body, false, nil)
		return err
	}

	fmt.Fprintf(stdout, "gwload: gateway (%s ext_proc) + picker (%s, in-process, plaintext loopback) + %d near-instant engines (bench/sim, 10,000x faster); %d-byte bodies (%s prompt).\n",
		mode, c.policy, c.engines, len(body), c.prompt)
	fmt.Fprintf(stdout, "Added latency = the gateway's time for a request minus the engine's (request sent to body read); the load\n")
	fmt.Fprintf(stdout, "generator shares the machine's CPUs with the gateway and the picker.\n\n")

	var steps []loadStep
	if c.sequential > 0 {
		st := loadStep{label: "sequential"}
		start := time.Now()
		for range c.sequential {
			if err := post(ctx); err != nil {
				st.failed++
			}
			st.sent++
		}
		st.achieved = float64(st.sent-st.failed) / time.Since(start).Seconds()
		s.gw.Wait()
		st.fill(take())
		steps = append(steps, st)
	}
	rng := rand.New(rand.NewPCG(c.seed, 0x9e3779b97f4a7c15))
	for _, rate := range rates {
		st := loadStep{label: fmt.Sprintf("%.0f req/s", rate), rate: rate}
		var wg sync.WaitGroup
		var fails sync.Mutex
		start := time.Now()
		at := time.Duration(0)
		for at < c.duration && ctx.Err() == nil {
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
		s.gw.Wait()
		st.fill(take())
		steps = append(steps, st)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	inflight, err := s.inFlight(ctx)
	if err != nil {
		return err
	}
	gwReport(stdout, steps, c.limit, inflight)
	return nil
}

func (st *loadStep) fill(os []gateway.Outcome) {
	for _, o := range os {
		if o.Err != "" {
			continue
		}
		st.added = append(st.added, ms(o.Added()))
		st.picker = append(st.picker, ms(o.PickerTime))
	}
}

func gwReport(w io.Writer, steps []loadStep, limit time.Duration, inflight float64) {
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

func parseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-rates: %q is not a positive number: pass a list like 500,1000,2000", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// f2 prints v with two decimals, "-" for NaN (no sample).
func f2(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
