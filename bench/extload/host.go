package extload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/trace"
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
