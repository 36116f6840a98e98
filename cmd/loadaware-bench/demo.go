package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/simpleengine"
	"github.com/loadaware/loadaware-epp/bench/stats"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

func init() {
	register(command{name: "demo", summary: "route a small shared-prefix workload through the real picker, roundrobin then loadaware", run: runDemo})
}

// demoCacheEntries is how many prefixes each demo engine remembers: fewer than the workload's
// 16, so scattering prefixes over every engine (roundrobin) costs cache hits.
const demoCacheEntries = 6

type demoConfig struct {
	engines    int
	slow       float64
	requests   int
	rate       float64
	maxTokens  int
	policies   string
	beta       float64
	mode       string
	seed       uint64
	timeout    time.Duration
	samples    int
	progress   bool
	verboseLog bool
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c demoConfig
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.engines, "engines", 3, "simple engines to start")
	fs.Float64Var(&c.slow, "slow", 2.5, "engine 0's delays are this many times the others' (1 = identical engines)")
	fs.IntVar(&c.requests, "requests", 300, "requests per policy")
	fs.Float64Var(&c.rate, "rate", 60, "mean arrival rate, requests/s (open-loop Poisson)")
	fs.IntVar(&c.maxTokens, "max-tokens", 16, "completion chunks per request")
	fs.StringVar(&c.policies, "policies", "roundrobin,loadaware", "policies to run in turn, comma-separated")
	fs.Float64Var(&c.beta, "beta", 1, "loadaware's beta")
	fs.StringVar(&c.mode, "body-mode", "full-duplex", "ext_proc body mode: full-duplex or buffered")
	fs.Uint64Var(&c.seed, "seed", 1, "workload seed (the same requests for every policy)")
	fs.DurationVar(&c.timeout, "timeout", 25*time.Second, "bound on one policy's run; unfinished requests count as errors")
	fs.IntVar(&c.samples, "samples", 2, "decisions to print per policy (sent with x-loadaware-explain: 1)")
	fs.BoolVar(&c.progress, "progress", true, "show progress on stderr (a bar on a terminal, a line per quarter otherwise)")
	fs.BoolVar(&c.verboseLog, "v", false, "show the picker's and the gateway's logs on stderr")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := demo(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "loadaware-bench demo: %v\n", err)
		return 1
	}
	return 0
}

// sent is one request as the client saw it.
type sent struct {
	index     int
	prefix    int
	status    int
	ttft      time.Duration // to the first data event
	e2e       time.Duration
	err       error
	decision  string
	explained bool // the request asked for the decision header
}

// policyRun is everything measured for one policy.
type policyRun struct {
	policy   string
	results  []sent
	outcomes map[string]gateway.Outcome // by request id
	elapsed  time.Duration
	inFlight float64
	hits     int64    // engine prefix-cache hits during the run
	admitted int64    // requests the engines started during the run
	addrs    []string // the engines' addresses, engine 0 first
}

func demo(ctx context.Context, c demoConfig, stdout, stderr io.Writer) error {
	mode, err := gateway.ParseBodyMode(c.mode)
	if err != nil {
		return err
	}
	if c.engines < 1 || c.slow <= 0 || c.requests < 1 || c.rate <= 0 || c.maxTokens < 1 || c.timeout <= 0 {
		return errors.New("-engines, -slow, -requests, -rate, -max-tokens and -timeout must be positive")
	}
	policies := strings.Split(c.policies, ",")

	wcfg := workload.Config{
		Profile: workload.ProfileShared, Requests: c.requests, Rate: c.rate, Prefixes: 16, ZipfS: 0.9,
		PrefixTokens: 256, SuffixTokens: 16, MaxTokens: c.maxTokens, PoolSeed: 7,
	}
	reqs, err := workload.Generate(wcfg, nil, c.seed)
	if err != nil {
		return err
	}

	logLevel := slog.LevelError + 4 // quiet: the demo prints its own summary
	if c.verboseLog {
		logLevel = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	engines := make([]simpleengine.Config, c.engines)
	for i := range engines {
		engines[i] = simpleengine.Config{Model: "demo", TTFT: 40 * time.Millisecond, HitTTFT: 10 * time.Millisecond,
			ITL: 5 * time.Millisecond, Slowdown: 0.25, PrefixBytes: 128, PrefixEntries: demoCacheEntries}
		if i == 0 {
			engines[i].TTFT = time.Duration(float64(engines[i].TTFT) * c.slow)
			engines[i].HitTTFT = time.Duration(float64(engines[i].HitTTFT) * c.slow)
			engines[i].ITL = time.Duration(float64(engines[i].ITL) * c.slow)
		}
	}

	fmt.Fprintf(stdout, "loadaware-bench demo: %d simple engines (engine 0 is %.1fx slower), the picker in-process (%s ext_proc),\n",
		c.engines, c.slow, mode)
	fmt.Fprintf(stdout, "%d requests per policy at %.0f req/s (Poisson), %d shared prefixes of %d tokens (Zipf %.1f), %d output chunks.\n",
		c.requests, c.rate, wcfg.Prefixes, wcfg.PrefixTokens, wcfg.ZipfS, c.maxTokens)
	fmt.Fprintf(stdout, "Each engine keeps %d prefixes (LRU; a hit cuts TTFT 4x). They publish no KV-cache events, so the picker's\n", demoCacheEntries)
	fmt.Fprintf(stdout, "cache view here is a router-side prefix index fed by its own decisions (the real one is LMCache's).\n")
	fmt.Fprintf(stdout, "Every policy gets a fresh stack (cold caches) and the same requests.\n\n")

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024, DisableCompression: true}}
	defer client.CloseIdleConnections()
	var runs []policyRun
	for _, p := range policies {
		run, err := runPolicy(ctx, client, p, engines, reqs, mode, log, c, stderr)
		if err != nil {
			return err
		}
		runs = append(runs, run)
	}
	report(stdout, runs, c)
	for _, r := range runs {
		if r.inFlight != 0 {
			return fmt.Errorf("the picker still counts %v requests in flight after %s: a booking leaked", r.inFlight, r.policy)
		}
	}
	return nil
}

// runPolicy starts a fresh stack with policy p, sends reqs through it and collects the results.
func runPolicy(ctx context.Context, client *http.Client, p string, engines []simpleengine.Config, reqs []workload.Request,
	mode gateway.BodyMode, log *slog.Logger, c demoConfig, stderr io.Writer) (policyRun, error) {
	run := policyRun{policy: p}
	var mu sync.Mutex
	outcomes := map[string]gateway.Outcome{}
	idx := newPrefixIndex(32, demoCacheEntries)
	s, err := startStack(ctx, stackConfig{
		engines: engines, policy: p, beta: c.beta, mode: mode, pickerLog: log, gatewayLog: log,
		cache: idx, observer: idx,
		onOutcome: func(o gateway.Outcome) {
			mu.Lock()
			outcomes[o.RequestID] = o
			mu.Unlock()
		},
	})
	if err != nil {
		return run, err
	}
	defer s.close()
	start := time.Now()
	run.results = drive(ctx, client, s.url, p, reqs, c, stderr)
	run.elapsed = time.Since(start)
	s.gw.Wait()
	if run.inFlight, err = s.inFlight(ctx); err != nil {
		return run, err
	}
	for _, e := range s.engines {
		st := e.Stats()
		run.hits += st.PrefixHits
		run.admitted += st.Requests
		run.addrs = append(run.addrs, e.Addr())
	}
	mu.Lock()
	run.outcomes = outcomes
	mu.Unlock()
	return run, ctx.Err()
}

// drive sends reqs open-loop at their SendAt offsets and waits for every answer (bounded by
// c.timeout). c.samples requests spread over the run ask the picker to explain its decision.
func drive(ctx context.Context, client *http.Client, url, policy string, reqs []workload.Request, c demoConfig, stderr io.Writer) []sent {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	results := make([]sent, len(reqs))
	step := len(reqs) / max(c.samples, 1)
	var wg sync.WaitGroup
	var done sync.WaitGroup
	progress := make(chan struct{}, len(reqs))
	done.Add(1)
	go func() {
		defer done.Done()
		bar(stderr, policy, len(reqs), progress, c.progress)
	}()
	start := time.Now()
	for i, r := range reqs {
		if d := time.Until(start.Add(r.SendAt)); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			explain := c.samples > 0 && step > 0 && i%step == step/2
			results[i] = send(ctx, client, url, fmt.Sprintf("demo-%s-%d", policy, i), r, explain)
			progress <- struct{}{}
		}()
	}
	wg.Wait()
	close(progress)
	done.Wait()
	return results
}

// send posts one streamed completion (prompt as token ids) and times its first event and end.
func send(ctx context.Context, client *http.Client, url, id string, r workload.Request, explain bool) sent {
	out := sent{index: r.Index, prefix: r.PrefixID, explained: explain}
	body, _ := json.Marshal(map[string]any{
		"model": "demo", "prompt": r.Tokens, "max_tokens": r.MaxTokens, "temperature": 0,
		"stream": true, "stream_options": map[string]bool{"include_usage": true},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(string(body)))
	if err != nil {
		out.err = err
		return out
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	if explain {
		req.Header.Set("X-Loadaware-Explain", "1")
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		out.err = err
		return out
	}
	defer resp.Body.Close()
	out.status = resp.StatusCode
	out.decision = resp.Header.Get("X-Loadaware-Decision")
	sc := bufio.NewScanner(resp.Body)
	sawDone := false
	for sc.Scan() {
		line := sc.Text()
		if out.ttft == 0 && strings.HasPrefix(line, "data: {") {
			out.ttft = time.Since(start)
		}
		sawDone = sawDone || line == "data: [DONE]"
	}
	out.e2e = time.Since(start)
	switch {
	case sc.Err() != nil:
		out.err = sc.Err()
	case resp.StatusCode != http.StatusOK:
		out.err = fmt.Errorf("status %d", resp.StatusCode)
	case !sawDone:
		out.err = errors.New("the stream ended without data: [DONE]")
	}
	return out
}

// bar shows progress on w until progress closes: a redrawn bar on a terminal, otherwise a line
// at every quarter.
func bar(w io.Writer, label string, total int, progress <-chan struct{}, show bool) {
	if !show {
		for range progress {
		}
		return
	}
	tty := isTerminal(w)
	n, quarter := 0, 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	render := func() {
		const width = 30
		filled := n * width / max(total, 1)
		fmt.Fprintf(w, "\r%-11s [%s%s] %d/%d", label, strings.Repeat("#", filled), strings.Repeat(".", width-filled), n, total)
	}
	for {
		select {
		case _, ok := <-progress:
			if !ok {
				if tty {
					render()
					fmt.Fprintln(w)
				}
				return
			}
			n++
			if !tty && n*4/max(total, 1) > quarter {
				quarter = n * 4 / max(total, 1)
				fmt.Fprintf(w, "%s: %d/%d requests answered\n", label, n, total)
			}
		case <-tick.C:
			if tty {
				render()
			}
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func report(w io.Writer, runs []policyRun, c demoConfig) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "\nRequests per engine:")
	head := "engine\t"
	for _, r := range runs {
		head += r.policy + "\t"
	}
	fmt.Fprintln(tw, head)
	for i := range c.engines {
		label := fmt.Sprintf("engine %d", i)
		if i == 0 && c.slow != 1 {
			label += " (slow)"
		}
		row := label + "\t"
		for _, r := range runs {
			n := 0
			for _, o := range r.outcomes {
				if o.Endpoint == r.addrs[i] {
					n++
				}
			}
			row += fmt.Sprintf("%d\t", n)
		}
		fmt.Fprintln(tw, row)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nLatency as the client saw it (ms), and what the gateway + picker added:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\tok\terrors\tprefix hits\tTTFT p50\tp95\tp99\te2e p50\tp95\tp99\tdecision p50\tp99\tadded p50\tp99\tin-flight after\t")
	for _, r := range runs {
		var ttft, e2e, dec, added []float64
		ok := 0
		for _, x := range r.results {
			if x.err == nil {
				ok++
				ttft = append(ttft, ms(x.ttft))
				e2e = append(e2e, ms(x.e2e))
			}
		}
		for _, o := range r.outcomes {
			if o.Err == "" {
				dec = append(dec, ms(o.PickerTime))
				added = append(added, ms(o.Added()))
			}
		}
		t, e, d, a := stats.Percentiles(ttft, 50, 95, 99), stats.Percentiles(e2e, 50, 95, 99), stats.Percentiles(dec, 50, 99), stats.Percentiles(added, 50, 99)
		hitRate := "-"
		if r.admitted > 0 {
			hitRate = fmt.Sprintf("%.0f%%", 100*float64(r.hits)/float64(r.admitted))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%v\t\n", r.policy, ok, len(r.results)-ok, hitRate,
			f1(t[0]), f1(t[1]), f1(t[2]), f1(e[0]), f1(e[1]), f1(e[2]), f2(d[0]), f2(d[1]), f2(a[0]), f2(a[1]), r.inFlight)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nSample decisions (x-loadaware-decision):")
	for _, r := range runs {
		for _, x := range r.results {
			if x.explained {
				d := x.decision
				if d == "" {
					d = "(none: " + errText(x.err) + ")"
				}
				fmt.Fprintf(w, "  %-11s request %d: %s\n", r.policy, x.index, d)
			}
		}
	}
	fmt.Fprintln(w)
	for _, r := range runs {
		errs := map[string]int{}
		for _, x := range r.results {
			if x.err != nil {
				errs[x.err.Error()]++
			}
		}
		keys := make([]string, 0, len(errs))
		for k := range errs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "%s: %d requests failed: %s\n", r.policy, errs[k], k)
		}
	}
	fmt.Fprintf(w, "Each policy's run took %s; the picker's in-flight count returned to zero after every run: %v.\n",
		durations(runs), allZero(runs))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func f1(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func f2(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}

func errText(err error) string {
	if err == nil {
		return "no header"
	}
	return err.Error()
}

func durations(runs []policyRun) string {
	var parts []string
	for _, r := range runs {
		parts = append(parts, fmt.Sprintf("%s %.1fs", r.policy, r.elapsed.Seconds()))
	}
	return strings.Join(parts, ", ")
}

func allZero(runs []policyRun) bool {
	for _, r := range runs {
		if r.inFlight != 0 {
			return false
		}
	}
	return true
}
