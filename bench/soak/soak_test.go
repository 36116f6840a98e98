// Package soak holds the sustained hostile-input run behind `make soak`: the real picker
// (app.Start with the LMCache controller), the Envoy stand-in gateway and two live engines
// (bench/sim on the wall clock) on loopback, serving steady traffic while hostile clients keep at it, with the process's
// RSS and goroutines recorded.
package soak

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/live"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/bench/stats"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/gctune"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/tokenize"
)

// sample is one reading of the process.
type sample struct {
	at         time.Duration
	rssMiB     float64
	goroutines int
	p99ms      float64 // of the steady requests finished since the previous sample
	ok, failed int
	refused    int          // hostile requests refused (ImmediateResponse) since the start
	rt         runtimePhase // the process since the previous sample
	// hostileCores is the hostile clients' own process's CPU per wall second since the
	// previous sample (0 when they run in the test's process).
	hostileCores float64
	bodyMiB      float64 // request body MiB the hostile bodies client got out since the previous sample
}

func rssMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return -1
}

// TestSoak runs for LOADAWARE_SOAK (a duration; unset: skipped) and writes its samples to
// LOADAWARE_SOAK_OUT (default soak.md). The picker's budgets are the defaults except the
// buffered-bytes budget (64 MiB, the Helm chart's; LOADAWARE_SOAK_BUFFERED_BYTES to change
// it) and the LMCache key budget (200k keys), scaled down so the
// hostile clients reach them in a short run. The process's collector is LOADAWARE_SOAK_GC's
// (tuneCollector: by default a picker's with --heap-pretouch in a 768 MiB container; make
// soak runs the chart's). LOADAWARE_SOAK_RAW names a file for every steady request's start
// and latency, on GODEBUG=gctrace=1's clock. LOADAWARE_SOAK_LMCACHE_HWM sets the LMCache
// controller's ZeroMQ receive queue (messages a peer; 0: its default).
// LOADAWARE_SOAK_CPUPROFILE names a file for a CPU profile of the process over the hostile
// window (profileHostile). soak.md ends with each
// window's tail second beside its median second, from a 100 ms timeline (decision 1188).
func TestSoak(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("LOADAWARE_SOAK"))
	if err != nil {
		t.Skip("set LOADAWARE_SOAK=5m (make soak) to run the sustained hostile-input run")
	}
	hostileCPUs := pinSoak(t)
	collector := tuneCollector(t)
	var addrs []string
	for range 2 {
		// A tenth of the calibrated step times: about 6 ms a steady request, engine time
		// that stays small beside the picker's and the gateway's.
		m := sim.DefaultConfig()
		m.Slowdown = 0.1
		e, err := live.StartEngine(live.EngineConfig{Model: m, IP: "127.0.0.1"})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		addrs = append(addrs, e.Addr())
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	on := func(name string) bool { // LOADAWARE_SOAK_HOSTILE picks the hostile clients; default all
		v := os.Getenv("LOADAWARE_SOAK_HOSTILE")
		return v == "" || slices.Contains(strings.Split(v, ","), name)
	}
	var tok picker.Tokenizer // the prompts client needs one; the others route token ids
	if on("prompts") {
		qwen, err := tokenize.Load("../../testdata/ext/qwen2_5")
		if err != nil {
			t.Fatalf("the prompts client tokenizes with Qwen2.5: %v (run make testdata)", err)
		}
		tok = &picker.Tokens{Local: qwen}
	}
	largeTok := 0 // LOADAWARE_SOAK_LARGE_TOKENIZATIONS: the picker's --large-tokenizations (-1: unbounded, to compare)
	if v := os.Getenv("LOADAWARE_SOAK_LARGE_TOKENIZATIONS"); v != "" {
		if largeTok, err = strconv.Atoi(v); err != nil {
			t.Fatalf("LOADAWARE_SOAK_LARGE_TOKENIZATIONS=%q: give a count, or -1", v)
		}
	}
	var streamRate int64 // LOADAWARE_SOAK_STREAM_RATE: the picker's --grpc-conn-stream-rate (0: its default; -1: unbounded)
	if v := os.Getenv("LOADAWARE_SOAK_STREAM_RATE"); v != "" {
		if streamRate, err = strconv.ParseInt(v, 10, 64); err != nil || streamRate < -1 {
			t.Fatalf("LOADAWARE_SOAK_STREAM_RATE=%q: give streams per second, 0 for the default, or -1", v)
		}
	}
	buffered := int64(64 << 20) // LOADAWARE_SOAK_BUFFERED_BYTES: the picker's --max-buffered-bytes
	if v := os.Getenv("LOADAWARE_SOAK_BUFFERED_BYTES"); v != "" {
		if buffered, err = strconv.ParseInt(v, 10, 64); err != nil || buffered < extproc.DefaultMaxBodySize {
			t.Fatalf("LOADAWARE_SOAK_BUFFERED_BYTES=%q: give bytes, at least the largest body (%d)", v, extproc.DefaultMaxBodySize)
		}
	}
	hwm := 0 // LOADAWARE_SOAK_LMCACHE_HWM: the controller's ZeroMQ receive high-water mark (0: its default)
	if v := os.Getenv("LOADAWARE_SOAK_LMCACHE_HWM"); v != "" {
		if hwm, err = strconv.Atoi(v); err != nil || hwm < 0 {
			t.Fatalf("LOADAWARE_SOAK_LMCACHE_HWM=%q: give messages, 0 for the default", v)
		}
	}
	ingestCPU := 0.0 // LOADAWARE_SOAK_LMCACHE_CPU: the controller's --lmcache-ingest-cpu (0: its default; -1: no budget)
	if v := os.Getenv("LOADAWARE_SOAK_LMCACHE_CPU"); v != "" {
		if ingestCPU, err = strconv.ParseFloat(v, 64); err != nil || ingestCPU < 0 && ingestCPU != -1 {
			t.Fatalf("LOADAWARE_SOAK_LMCACHE_CPU=%q: give a share of one CPU, 0 for the default, -1 for none", v)
		}
	}
	largeCPU := 0.0 // LOADAWARE_SOAK_LARGE_TOKENIZE_CPU: the picker's --large-tokenize-cpu (0: its default; -1: no budget)
	if v := os.Getenv("LOADAWARE_SOAK_LARGE_TOKENIZE_CPU"); v != "" {
		if largeCPU, err = strconv.ParseFloat(v, 64); err != nil || (largeCPU < 0 && largeCPU != -1) {
			t.Fatalf("LOADAWARE_SOAK_LARGE_TOKENIZE_CPU=%q: give a share of one CPU, 0 for the default, -1 for none", v)
		}
	}
	keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: 256, Format: lmcache.KeyFormatV03}
	a, err := app.Start(context.Background(), app.Config{
		GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		Endpoints: addrs, Policy: "loadaware", Beta: 1, MaxEndpoints: 2, BodyMode: extproc.FullDuplex,
		Limits:    extproc.Limits{MaxBufferedBytes: buffered, IdleTimeout: 5 * time.Second},
		Health:    app.HealthConfig{CheckInterval: 250 * time.Millisecond},
		LMCache:   &app.LMCacheConfig{PullAddr: "127.0.0.1:0", Keys: keys, Allow: lmcache.AllowFleet, MaxKeys: 200_000, RcvHWM: hwm, IngestCPU: ingestCPU},
		Tokenizer: tok, LargeTokenizations: largeTok, LargeTokenizeCPU: largeCPU, ConnStreamRate: streamRate, ConnStreamBurst: streamRate,
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	gw, err := gateway.Dial(a.GRPCAddr(), gateway.Options{Logger: quiet, OnOutcome: recordPickerTime})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	srv := httptest.NewServer(gw)
	defer srv.Close()

	// Steady traffic alone comes first: warmUp, not counted (the first requests' connections,
	// the runtime's first trim after a pre-touch), then idleFor, the latency the rest is
	// compared with: as long as the hostile window up to 20 s, so that the two p99s rest on
	// as many requests, and at least a quarter of a longer run (decision 1187).
	idleFor := max(d/4, min(d, 20*time.Second))
	// The run ends by cancellation, not by a deadline: a deadline would travel to the picker as
	// grpc-timeout, and under load the picker's copy of it can fire (and answer
	// DeadlineExceeded) before this side's context reports itself done, which reads as a failure.
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	time.AfterFunc(warmUp+idleFor+d, stop)
	// The hostile clients are prepared first (their process started, connected, payloads
	// built), so that none of that lands in either window.
	hostile := prepareHostile(ctx, t, targets{GRPC: a.GRPCAddr(), Metrics: a.MetricsAddr(), LMCachePull: a.LMCachePullAddr(),
		Gateway: srv.URL, Clients: os.Getenv("LOADAWARE_SOAK_HOSTILE"), CPUs: hostileCPUs})
	begin := time.Now()
	steadyStart(t, srv.URL, ctx)
	timeline := recordTimeline(ctx, begin, hostile.cpu, hostile.now)
	rtBegin := readRuntime()
	select {
	case <-time.After(warmUp + idleFor):
	case <-ctx.Done():
	}
	hostileFrom := time.Since(begin)
	rtHostile := readRuntime()
	hostileCPUBegin := hostile.cpu()
	ingestBegin := readIngest(t, a.MetricsAddr())
	hostile.start()
	profiled := profileOnset(t, d)
	stopCPUProfile := profileHostile(t)
	defer stopCPUProfile()
	traced := traceRaw(ctx, a)
	var samples []sample
	rtPrev, hostileCPUPrev, bodyPrev := rtHostile, hostileCPUBegin, int64(0)
	every := min(5*time.Second, d/6)
	tick := time.NewTicker(every)
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			now := time.Since(begin)
			st.mu.Lock()
			var window []time.Duration
			for _, r := range st.done {
				if r.at > now-every {
					window = append(window, r.took)
				}
			}
			got := hostile.now()
			s := sample{at: now.Round(time.Second), rssMiB: rssMiB(), goroutines: runtime.NumGoroutine(), ok: st.ok, failed: st.failed, refused: int(got.Refused),
				bodyMiB: float64(got.BodyBytes-bodyPrev) / (1 << 20)}
			bodyPrev = got.BodyBytes
			st.mu.Unlock()
			s.p99ms = p99(window)
			rtNow := readRuntime()
			s.rt, rtPrev = phase(rtPrev, rtNow), rtNow
			hostileCPUNow := hostile.cpu()
			s.hostileCores = (hostileCPUNow - hostileCPUPrev).Seconds() / s.rt.wall
			hostileCPUPrev = hostileCPUNow
			samples = append(samples, s)
			t.Logf("%+v", s)
		}
	}
	tick.Stop()
	stopCPUProfile()
	rtEnd, hostileCPUEnd := readRuntime(), hostile.cpu()
	ingestEnd := readIngest(t, a.MetricsAddr())
	profiled()
	st.wg.Wait()
	got := hostile.wait()
	readings := timeline()
	idle, loaded := split(st.done, warmUp, hostileFrom)
	pickIdle, pickLoaded := split(st.picker, warmUp, hostileFrom)
	lo, hi := ratioInterval(idle, loaded, 0.90, 2000)
	failed := st.failed

	where, alsoHostile := "The hostile clients ran in the test's process (LOADAWARE_SOAK_HOSTILE_PROCESS=own: in their own).", ", hostile clients"
	own := os.Getenv("LOADAWARE_SOAK_HOSTILE_PROCESS") == "own"
	if own {
		where, alsoHostile = "The hostile clients ran in a process of their own (LOADAWARE_SOAK_HOSTILE_PROCESS=own).", ""
		if hostileCPUs != nil {
			where += fmt.Sprintf(" Pinned (LOADAWARE_SOAK_PIN=1): the test's process on one CPU alone with GOMAXPROCS 1, the hostile clients on CPUs %v.", hostileCPUs)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Soak: steady traffic (50 req/s), %v alone (after %v not counted), then %v beside hostile clients\n\n", idleFor, warmUp, d)
	fmt.Fprintf(&b, "Steady p99: %.2f ms alone, %.2f ms beside the hostile clients (ratio %.2f; 90%% interval %.2f-%.2f, resampling each window's %d and %d requests); %d ok, %d failed.\n\n",
		p99(idle), p99(loaded), p99(loaded)/p99(idle), lo, hi, len(idle), len(loaded), st.ok, st.failed)
	fmt.Fprintf(&b, "The process's collector (LOADAWARE_SOAK_GC): %s. The buffered-bytes budget: %d MiB.\n\n", collector.Why, buffered>>20)
	fmt.Fprintf(&b, "Steady latency p50 / p90 / p99.9, ms: %s alone, %s beside the hostile clients.\n\n", spread(idle), spread(loaded))
	fmt.Fprintf(&b, "The picker's part of it (the gateway's request headers sent to the routing answer): p99 %.2f ms alone, %.2f ms beside the hostile clients (ratio %.2f); p50 / p90 / p99.9 %s alone, %s beside.\n\n",
		p99(pickIdle), p99(pickLoaded), p99(pickLoaded)/p99(pickIdle), spread(pickIdle), spread(pickLoaded))
	fmt.Fprintf(&b, "Hostile clients (LOADAWARE_SOAK_HOSTILE=%q; empty: all): 32 unfinished 4 MiB bodies at a time, STREAMED-mode streams, 500 idle connections to the metrics port, one engine IP pushing junk LMCache instance ids and keys, 4 worst-shape prompts (256 KiB of whitespace) at a time, 4 HTTP clients sending 1 MiB bodies through the gateway (sharing its ext_proc connection with the steady traffic). %s RSS is the test's process (picker, gateway, engines, steady clients%s).\n\n", os.Getenv("LOADAWARE_SOAK_HOSTILE"), where, alsoHostile)
	hostileSecs := rtEnd.at.Sub(rtHostile.at).Seconds()
	fmt.Fprintf(&b, "Where the time went (Go runtime/metrics and getrusage; the whole process):\n\n- alone: %v\n- beside the hostile clients: %v\n- the hostile senders got out %.1f MiB/s of request bodies, %.0f LMCache events/s, %.1f worst-shape prompts routed/s and %.1f MiB/s of bodies through the gateway\n\n",
		phase(rtBegin, rtHostile), phase(rtHostile, rtEnd), float64(got.BodyBytes)/(1<<20)/hostileSecs, float64(got.LMCacheFrames)/hostileSecs, float64(got.PromptsRouted)/hostileSecs, float64(got.SharedBytes)/(1<<20)/hostileSecs)
	if own {
		hostileCores := (hostileCPUEnd - hostileCPUBegin).Seconds() / hostileSecs
		fmt.Fprintf(&b, "The hostile clients' process used %.0f ms of CPU getting ready (started, connected, payloads built) before the steady traffic began, and %.2f cores beside it; with the test's process, %.2f of the %d CPUs (a run whose two processes got much less than the machine measures the host: decision 1187).\n\n",
			hostileCPUBegin.Seconds()*1000, hostileCores, hostileCores+phase(rtHostile, rtEnd).cores, runtime.NumCPU())
	}
	b.WriteString("The windows (each since the previous row; the first since the hostile clients started): the process's CPU, its minor page faults (first touches of memory), its goroutines' wait to run, its collections and the heap the window's last one marked live (a dash: none in the window); the hostile clients' own process's CPU (LOADAWARE_SOAK_HOSTILE_PROCESS=own; else 0, counted in the process's); and the request body MiB the bodies client got out.\n\n")
	b.WriteString("| t | RSS MiB | goroutines | steady p99 ms | steady ok | steady failed | hostile refused | CPU cores | page faults/s | wait to run p99 us | GC cycles/s | live heap MiB | hostile process CPU cores | hostile body MiB |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range samples {
		live := "-"
		if s.rt.liveMiB >= 0 {
			live = fmt.Sprintf("%.0f", s.rt.liveMiB)
		}
		fmt.Fprintf(&b, "| %v | %.0f | %d | %.2f | %d | %d | %d | %.2f | %.0f | %.0f | %.1f | %s | %.2f | %.1f |\n", s.at, s.rssMiB, s.goroutines, s.p99ms, s.ok, s.failed, s.refused,
			s.rt.cores, s.rt.faultsPerSec, s.rt.schedP99us, s.rt.gcPerSec, live, s.hostileCores, s.bodyMiB)
	}
	fmt.Fprintf(&b, "\nEach window's tail second: the second (sliding by %v) whose starts hold the most of the window's requests over its p99, and what happened in it, against the window's median second (decision 1188). The rest of the machine is its busy CPU less the two processes'; the wait for a CPU is the kernel's run queue, the wait to run Go's.\n\n", timelineStep)
	clock := begin.Sub(processStart)
	b.WriteString(windowTail("alone", st.done, readings, warmUp, hostileFrom, clock))
	b.WriteString(windowTail("beside the hostile clients", st.done, readings, hostileFrom, hostileFrom+d, clock))
	if f, ok := spanFigures(readings, hostileFrom, hostileFrom+time.Second); ok {
		fmt.Fprintf(&b, "- the hostile clients' first second (their onset): %v\n", f)
	}
	fmt.Fprintf(&b, "\nLMCache index at the end: %d keys, %d instances. Its pull loop beside the hostile clients (LOADAWARE_SOAK_LMCACHE_CPU=%q): %.1f ms of CPU a second, paused %.1f ms a second for its CPU budget.\n",
		a.LMCacheIndex.Keys(), len(a.LMCacheIndex.Instances()), os.Getenv("LOADAWARE_SOAK_LMCACHE_CPU"),
		(ingestEnd.cpu-ingestBegin.cpu)*1000/hostileSecs, (ingestEnd.paused-ingestBegin.paused)*1000/hostileSecs)
	fmt.Fprintf(&b, "\nPrompts of 32 KiB or more beside the hostile clients (LOADAWARE_SOAK_LARGE_TOKENIZE_CPU=%q): %.1f ms of tokenizing CPU a second charged to --large-tokenize-cpu's budget; %.1f a second routed on load alone with every slot taken (text-tokenizer-busy), %.1f with the budget in debt (text-tokenizer-over-budget).\n",
		os.Getenv("LOADAWARE_SOAK_LARGE_TOKENIZE_CPU"), (ingestEnd.largeCPU-ingestBegin.largeCPU)*1000/hostileSecs,
		(ingestEnd.busy-ingestBegin.busy)/hostileSecs, (ingestEnd.overBudget-ingestBegin.overBudget)/hostileSecs)
	out := os.Getenv("LOADAWARE_SOAK_OUT")
	if out == "" {
		out = "soak.md"
	}
	if err := os.WriteFile(out, []byte(b.String()), 0o644); err != nil {
		t.Error(err)
	}
	if raw := os.Getenv("LOADAWARE_SOAK_RAW"); raw != "" {
		var rb strings.Builder
		off := begin.Sub(processStart).Seconds()
		fmt.Fprintf(&rb, "# seconds since the process started (GODEBUG=gctrace=1's clock) at which each steady request started, and its latency in ms; counted alone from %.3f, hostile from %.3f\n", off+warmUp.Seconds(), off+hostileFrom.Seconds())
		st.mu.Lock()
		for _, r := range st.done {
			fmt.Fprintf(&rb, "%.3f,%.2f\n", off+(r.at-r.took).Seconds(), float64(r.took)/float64(time.Millisecond))
		}
		st.mu.Unlock()
		rb.WriteString("# every 250 ms from the hostile clients' start, on the same clock: the heap's objects MiB, the runtime's mapped MiB (total less released), minor page faults so far, LMCache keys indexed\n")
		for _, p := range traced() {
			fmt.Fprintf(&rb, "@%.3f,%.1f,%.1f,%d,%d\n", p.at.Sub(processStart).Seconds(), p.objectsMiB, p.mappedMiB, p.faults, p.keys)
		}
		if err := os.WriteFile(raw, []byte(rb.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Log("\n" + b.String())

	if failed > 0 {
		t.Errorf("%d steady requests failed beside the hostile clients", failed)
	}
	if n := a.LMCacheIndex.Keys(); n > 200_000 {
		t.Errorf("the index holds %d keys, over its budget", n)
	}
	if n := len(a.LMCacheIndex.Instances()); n > lmcache.DefaultMaxInstancesPerIP {
		t.Errorf("%d LMCache instances from one IP, over the cap", n)
	}
	deadline := time.Now().Add(5 * time.Second) // the last streams' releases follow their responses
	for inflight(a) != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, l := range a.Fleet.All() {
		if l.InFlight() != 0 {
			t.Errorf("%s has %d requests booked after the run: a booking was lost", l.Addr, l.InFlight())
		}
	}
	if len(samples) >= 2 {
		first, last := samples[0], samples[len(samples)-1]
		if last.rssMiB > 1024 {
			t.Errorf("RSS %.0f MiB at the end, over the 1 GiB pod budget", last.rssMiB)
		}
		t.Logf("RSS %.0f -> %.0f MiB, goroutines %d -> %d", first.rssMiB, last.rssMiB, first.goroutines, last.goroutines)
	}
}

// steady is the well-behaved traffic: 50 requests/s through the gateway.
type steady struct {
	begin      time.Time
	mu         sync.Mutex
	done       []result // the client's latencies
	picker     []result // the gateway's PickerTime of the same requests
	ok, failed int
	wg         sync.WaitGroup
}

type result struct{ at, took time.Duration } // finished at (since the start), latency

// steadyIDPrefix starts the x-request-id of every steady request, so the gateway's outcomes
// of the steady traffic can be told from the hostile senders'.
const steadyIDPrefix = "steady-"

// recordPickerTime is the gateway's OnOutcome: a steady request's PickerTime, finished at
// its start plus that time.
func recordPickerTime(o gateway.Outcome) {
	if !strings.HasPrefix(o.RequestID, steadyIDPrefix) || o.Err != "" {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	start := time.Since(st.begin) - o.Total
	st.picker = append(st.picker, result{start + o.PickerTime, o.PickerTime})
}

// warmUp is the start of the steady traffic that neither window counts.
const warmUp = 2 * time.Second

// split parts the latencies of rs by when each request started: in [warm, from) (alone)
// and from on (beside); those that started before warm are in neither.
func split(rs []result, warm, from time.Duration) (before, after []time.Duration) {
	for _, r := range rs {
		switch start := r.at - r.took; {
		case start < warm:
		case start < from:
			before = append(before, r.took)
		default:
			after = append(after, r.took)
		}
	}
	return before, after
}

// ratioInterval is the central interval at level of p99(b)/p99(a), from resamples
// resamplings of each (with replacement, a fixed seed); NaNs when either is empty.
func ratioInterval(a, b []time.Duration, level float64, resamples int) (lo, hi float64) {
	if len(a) == 0 || len(b) == 0 || resamples < 1 {
		return math.NaN(), math.NaN()
	}
	rng := rand.New(rand.NewPCG(1187, 35))
	xa, xb := millis(a), millis(b)
	ra, rb := make([]float64, len(xa)), make([]float64, len(xb))
	ratios := make([]float64, resamples)
	for i := range ratios {
		for j := range ra {
			ra[j] = xa[rng.IntN(len(xa))]
		}
		for j := range rb {
			rb[j] = xb[rng.IntN(len(xb))]
		}
		ratios[i] = stats.Percentile(rb, 99) / stats.Percentile(ra, 99)
	}
	q := stats.Percentiles(ratios, 50-level*50, 50+level*50)
	return q[0], q[1]
}

var st *steady

// processStart is about when the process started (package initialization): GODEBUG=gctrace=1
// stamps collections with the time since then.
var processStart = time.Now()

func steadyStart(t *testing.T, url string, ctx context.Context) {
	st = &steady{begin: time.Now()}
	begin := st.begin
	client := &http.Client{Timeout: 10 * time.Second}
	st.wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			st.wg.Go(func() {
				body := fmt.Sprintf(`{"model":"m","prompt":[1,2,3,%d],"max_tokens":2,"stream":true}`, i%64)
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url+"/v1/completions", strings.NewReader(body))
				if err != nil {
					panic(err) // a constant URL and method
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Request-Id", steadyIDPrefix+strconv.Itoa(i))
				start := time.Now()
				resp, err := client.Do(req)
				good := err == nil && resp.StatusCode == 200
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				st.mu.Lock()
				defer st.mu.Unlock()
				if good {
					st.ok++
					st.done = append(st.done, result{time.Since(begin), time.Since(start)})
				} else if ctx.Err() == nil {
					st.failed++
					t.Logf("steady request %d failed: %v", i, err)
				}
			})
		}
	})
}

// tracePoint is one of traceRaw's readings.
type tracePoint struct {
	at                    time.Time
	objectsMiB, mappedMiB float64
	faults                int64
	keys                  int
}

// traceRaw, with LOADAWARE_SOAK_RAW set, reads the process's heap, mapped memory, page faults
// and a's LMCache key count every 250 ms until ctx ends; the function it returns waits for
// that and gives the readings. Without the variable it reads nothing.
func traceRaw(ctx context.Context, a *app.App) func() []tracePoint {
	if os.Getenv("LOADAWARE_SOAK_RAW") == "" {
		return func() []tracePoint { return nil }
	}
	var points []tracePoint
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			metrics.Read(s)
			var ru syscall.Rusage
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
			points = append(points, tracePoint{at: time.Now(), objectsMiB: float64(s[0].Value.Uint64()) / (1 << 20),
				mappedMiB: float64(gctune.Mapped()) / (1 << 20), faults: ru.Minflt, keys: a.LMCacheIndex.Keys()})
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() []tracePoint { <-done; return points }
}

// p99 is d's 99th percentile in milliseconds, 0 for none.
func p99(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	return stats.Percentiles(millis(d), 99)[0]
}

// spread is d's p50, p90 and p99.9 in milliseconds.
func spread(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	q := stats.Percentiles(millis(d), 50, 90, 99.9)
	return fmt.Sprintf("%.2f / %.2f / %.2f", q[0], q[1], q[2])
}

func millis(d []time.Duration) []float64 {
	xs := make([]float64, len(d))
	for i, x := range d {
		xs[i] = float64(x) / float64(time.Millisecond)
	}
	return xs
}

func inflight(a *app.App) int {
	n := 0
	for _, l := range a.Fleet.All() {
		n += l.InFlight()
	}
	return n
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// ingestReading is the LMCache pull loop's two counters, CPU seconds used and seconds
// paused for its budget, and the large tokenizations' three: CPU seconds charged to their
// budget, and text prompts routed on load alone with every slot taken or the budget in debt.
type ingestReading struct{ cpu, paused, largeCPU, busy, overBudget float64 }

// readIngest scrapes the picker's metrics for those counters (zero if absent).
func readIngest(t *testing.T, metricsAddr string) ingestReading {
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Logf("read the LMCache ingest counters: %v", err)
		return ingestReading{}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Logf("read the LMCache ingest counters: %v", err)
		return ingestReading{}
	}
	var r ingestReading
	for line := range strings.SplitSeq(string(body), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(val, 64)
		switch name {
		case "loadaware_lmcache_ingest_cpu_seconds_total":
			r.cpu = v
		case "loadaware_lmcache_ingest_paused_seconds_total":
			r.paused = v
		case "loadaware_large_tokenize_cpu_seconds_total":
			r.largeCPU = v
		case `loadaware_untokenized_requests_total{reason="text-tokenizer-busy"}`:
			r.busy = v
		case `loadaware_untokenized_requests_total{reason="text-tokenizer-over-budget"}`:
			r.overBudget = v
		}
	}
	return r
}
