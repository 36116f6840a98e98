package extload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/trace"
	"slices"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/tokenize"
	"google.golang.org/grpc"
)

// LockedWriter returns a writer that serializes writes to w, for output that
// several goroutines (child processes' logs, progress) share.
func LockedWriter(w io.Writer) io.Writer { return &lockedWriter{w: w} }

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// StartFlight starts a flight recorder that keeps the last 3 s (a window and its warm-up,
// and the snapshot's own delay), at most 64 MiB.
func StartFlight() (*trace.FlightRecorder, error) {
	fr := trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: 3 * time.Second, MaxBytes: 64 << 20})
	if err := fr.Start(); err != nil {
		return nil, err
	}
	return fr, nil
}

// WriteFlight writes fr's recording to path.
func WriteFlight(fr *trace.FlightRecorder, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := fr.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// ServeFloor serves s, one of the floor servers, with gRPC's defaults on a loopback port.
func ServeFloor(s extprocv3.ExternalProcessorServer) (string, func() error, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("listen on a loopback port: %w", err)
	}
	srv := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(srv, s)
	go func() { _ = srv.Serve(lis) }()
	return lis.Addr().String(), func() error { srv.Stop(); return nil }, nil
}

// StartPicker starts the picker as `loadaware-epp serve` would with static endpoints that
// are never contacted (active health checks off), plaintext ext_proc and the embedded
// LMCache controller, every port on loopback. It returns the rest of the child's
// "listening" line: the ext_proc address, then lmcache=PULL-ADDR and metrics=ADDR.
func StartPicker(ctx context.Context, endpoints int, policy, tokenizerPath string, omitScores bool, stderr io.Writer) (string, func() error, error) {
	addrs := make([]string, endpoints)
	for i := range addrs {
		addrs[i] = EndpointIP(i) + ":8000"
	}
	cfg := app.Config{
		GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		Endpoints: addrs, Policy: policy, Beta: 1, BodyMode: extproc.FullDuplex, OmitScores: omitScores,
		LMCache: &app.LMCacheConfig{PullAddr: "127.0.0.1:0", ReplyAddr: "127.0.0.1:0",
			Keys: lmcache.KeyConfig{HashSeed: "123", ChunkSize: 256, Format: lmcache.KeyFormatV03}},
	}
	if tokenizerPath != "" {
		tk, err := tokenize.Load(tokenizerPath)
		if err != nil {
			return "", nil, err
		}
		cfg.Tokenizer = &picker.Tokens{Local: tk}
	}
	a, err := app.Start(ctx, cfg, slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		return "", nil, fmt.Errorf("start the picker: %w", err)
	}
	return a.GRPCAddr() + " lmcache=" + a.LMCachePullAddr() + " metrics=" + a.MetricsAddr(), a.Close, nil
}

// EndpointIP is the IP of the picker's i-th static endpoint: 127.1.0.1 on, in
// loopback's 127.0.0.0/8, so that the LMCache feeder can connect from it (the controller
// admits peers by the fleet's IPs). Nothing listens there: the endpoints are never contacted.
func EndpointIP(i int) string {
	n := i + 1
	return fmt.Sprintf("127.%d.%d.%d", 1+n>>16, n>>8&255, n&255)
}

// Pinning is what PinGenerator did: a line for the report, and how to undo it.
type Pinning struct {
	Text    string
	Restore func()
}

// PinGenerator pins this process (the generator) to every CPU it may use but the last,
// and returns the last, for the servers; -1 and no pin when pin is off or there is only
// one CPU. The report's line says which.
func PinGenerator(pin bool) (serverCPU int, p Pinning, err error) {
	p = Pinning{Text: "not pinned (-pin=false): the generator and the server share every CPU.", Restore: func() {}}
	if !pin {
		return -1, p, nil
	}
	cpus, err := CPUs()
	if err != nil {
		return -1, p, fmt.Errorf("%w (or pass -pin=false)", err)
	}
	if len(cpus) < 2 {
		p.Text = fmt.Sprintf("not pinned: this process may use only CPU %v, so the generator and the server share it.", cpus)
		return -1, p, nil
	}
	last := cpus[len(cpus)-1]
	restore, err := Pin(cpus[:len(cpus)-1])
	if err != nil {
		return -1, p, fmt.Errorf("%w (or pass -pin=false)", err)
	}
	// As many Ps as CPUs: more would time-share the generator's CPUs between Ps, and a
	// goroutine queued on a P whose thread the kernel has set aside waits for the kernel.
	procs := runtime.GOMAXPROCS(len(cpus) - 1)
	p.Text = fmt.Sprintf("pinned: each server process on CPU %d alone, the generator on CPU(s) %v with GOMAXPROCS %d (-pin=false shares them).",
		last, cpus[:len(cpus)-1], len(cpus)-1)
	p.Restore = func() {
		runtime.GOMAXPROCS(procs)
		_ = restore()
	}
	return last, p, nil
}

// Measure is one server's window at one rate: a warm-up of Warmup, then the measured
// Window (whose Seed+500 seeds the measured arrivals, Seed the warm-up's).
type Measure struct {
	Server  string
	Rate    float64
	Client  extprocv3.ExternalProcessorClient
	Child   *Child // the server's process, for its CPU usage
	Request Request
	Window  WindowConfig // Duration, Progress: the measured window's
	Warmup  time.Duration
	// During, when not nil, starts something that runs beside both windows (an LMCache
	// feed) and returns how to stop it.
	During func(ctx context.Context) (stop func() error)
}

// MeasureWindow runs m's warm-up and measured window and returns the measured window
// with the server's and this process's CPU over it.
func MeasureWindow(ctx context.Context, m Measure) (_ Arm, err error) {
	if m.During != nil {
		stop := m.During(ctx)
		defer func() {
			if ferr := stop(); ferr != nil && err == nil {
				err = ferr
			}
		}()
	}
	wc := m.Window
	wc.Duration, wc.Progress = m.Warmup, nil
	if m.Warmup > 0 {
		if _, err := Run(ctx, m.Client, m.Request, wc); err != nil {
			return Arm{}, err
		}
	}
	wc = m.Window
	wc.Seed += 500
	before, err := m.Child.Usage()
	if err != nil {
		return Arm{}, err
	}
	genBefore, err := ProcessCPU()
	if err != nil {
		return Arm{}, err
	}
	w, err := Run(ctx, m.Client, m.Request, wc)
	if err != nil {
		return Arm{}, err
	}
	genAfter, err := ProcessCPU()
	if err != nil {
		return Arm{}, err
	}
	after, err := m.Child.Usage()
	if err != nil {
		return Arm{}, err
	}
	if w.Sent > 0 && w.Failed == w.Sent {
		for msg := range w.Errors {
			return Arm{}, fmt.Errorf("every request to the %s server failed, e.g. %s", m.Server, msg)
		}
	}
	used := after.Sub(before)
	return Arm{Server: m.Server, Rate: m.Rate, Window: w, CPU: used.CPU, GCCPU: used.GCCPU, GCs: used.GCs, AllocBytes: used.AllocBytes,
		GeneratorCPU: genAfter - genBefore}, nil
}

// SnapshotStall writes the server's (ch's) and the generator's (gen's) flight recordings
// to dir when arm's window (of round) had a round trip over stall, and says so on log.
func SnapshotStall(dir string, stall time.Duration, ch *Child, gen *trace.FlightRecorder, arm Arm, round int, log io.Writer) error {
	if len(arm.Window.Totals) == 0 {
		return nil
	}
	longest := slices.Max(arm.Window.Totals)
	if longest <= stall {
		return nil
	}
	name := fmt.Sprintf("%s-%.0f-round%03d.trace", arm.Server, arm.Rate, round)
	path := filepath.Join(dir, name)
	if err := ch.Snapshot(path); err != nil {
		return err
	}
	genPath := filepath.Join(dir, "generator-"+name)
	if err := WriteFlight(gen, genPath); err != nil {
		return fmt.Errorf("write the generator's flight recording: %w", err)
	}
	fmt.Fprintf(log, "%s at %.0f/s, round %d: a %v round trip; the last seconds of the server and the generator are in %s and %s\n",
		arm.Server, arm.Rate, round, longest.Round(time.Microsecond), path, genPath)
	return nil
}
