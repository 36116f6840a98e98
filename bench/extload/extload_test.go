package extload

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/bench/stats"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve runs srv on a loopback port as ServeFloor does and returns a client of it.
func serve(t *testing.T, srv extprocv3.ExternalProcessorServer, opts ...grpc.DialOption) extprocv3.ExternalProcessorClient {
	t.Helper()
	addr, stop, err := ServeFloor(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

// flood answers a stream's first message with n bodies of size bytes each, then closes
// sent and waits for the client to end the stream.
type flood struct {
	extprocv3.UnimplementedExternalProcessorServer
	n, size int
	sent    chan struct{}
}

func (f flood) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	if _, err := srv.Recv(); err != nil {
		return err
	}
	body := gateway.RequestBodyMessage(make([]byte, f.size), false).GetRequestBody()
	for range f.n {
		if err := srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
				Mutation: &extprocv3.BodyMutation_Body{Body: body.GetBody()}}}}}}); err != nil {
			return err
		}
	}
	close(f.sent)
	_, err := srv.Recv()
	return err
}

// TestDialOptionsReceiveAsEnvoy: with Envoy's windows a server's answers reach the client
// whether or not the client has read the earlier ones yet; with gRPC's own client windows
// the server stops at about 64 KiB until the client reads.
func TestDialOptionsReceiveAsEnvoy(t *testing.T) {
	for _, envoy := range []bool{true, false} {
		t.Run(fmt.Sprintf("envoy=%v", envoy), func(t *testing.T) {
			f := flood{n: 16, size: 64 << 10, sent: make(chan struct{})}
			var opts []grpc.DialOption
			if envoy {
				opts = DialOptions()
			}
			c := serve(t, f, opts...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := c.Process(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(gateway.RequestBodyMessage([]byte("x"), true)); err != nil {
				t.Fatal(err)
			}
			// The client reads nothing until the server has sent all 1 MiB, or the wait
			// ends: long for the answers to arrive, short for the control to stall.
			wait := 300 * time.Millisecond
			if envoy {
				wait = 10 * time.Second
			}
			timeout := time.NewTimer(wait)
			defer timeout.Stop()
			select {
			case <-f.sent:
				if !envoy {
					t.Fatal("1 MiB of answers went through gRPC's default 64 KiB window unread: the control no longer shows what the windows change")
				}
			case <-timeout.C:
				if envoy {
					t.Fatalf("the server could not send 1 MiB of answers the client had not read yet in %v: the client's windows are not Envoy's", wait)
				}
			}
			for range f.n {
				if _, err := st.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			_ = st.CloseSend()
			<-f.sent
		})
	}
}

// router answers as the picker does in full-duplex mode: the headers answer (with a
// destination) once the body has ended, the body streamed back, the response echoed; or,
// with immediate, a 400 to the body.
type router struct {
	extprocv3.UnimplementedExternalProcessorServer
	immediate bool
}

func (r router) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	streamed := func(b []byte, eos bool) *extprocv3.BodyResponse {
		return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: b, EndOfStream: eos}}}}}
	}
	for {
		req, err := srv.Recv()
		if err != nil {
			return nil
		}
		var out []*extprocv3.ProcessingResponse
		switch v := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
		case *extprocv3.ProcessingRequest_RequestBody:
			if r.immediate {
				return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
					ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode_BadRequest}, Body: []byte("bad body")}}})
			}
			set := []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: gateway.DestinationHeader, RawValue: []byte("10.0.0.1:8000")}}}
			out = append(out,
				&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
					Response: &extprocv3.CommonResponse{HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}}}},
				&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: streamed(v.RequestBody.GetBody(), true)}})
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			out = append(out, &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{ResponseHeaders: &extprocv3.HeadersResponse{}}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			if err := srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: streamed(v.ResponseBody.GetBody(), true)}}); err != nil {
				return err
			}
			return nil // the picker ends the stream at the end of the response
		}
		for _, o := range out {
			if err := srv.Send(o); err != nil {
				return err
			}
		}
	}
}

var testRequest = Request{Path: "/v1/completions", Body: []byte(`{"model":"m","prompt":[1,2,3]}`), ResponseBody: []byte("data: [DONE]\n\n")}

func TestExchange(t *testing.T) {
	tests := []struct {
		name       string
		srv        extprocv3.ExternalProcessorServer
		wantRouted bool
		wantErr    string
	}{
		{"the do-nothing server continues every message", Nothing{}, false, ""},
		{"the pass-through server streams the bodies back", PassThrough{}, false, ""},
		{"a picker routes and streams the bodies back", router{}, true, ""},
		{"an immediate response is a failure", router{immediate: true}, false, "answered the client itself: 400 bad body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, tt.srv)
			start := time.Now()
			res, err := Exchange(context.Background(), c, testRequest, start)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Routed != tt.wantRouted {
				t.Errorf("routed = %v, want %v", res.Routed, tt.wantRouted)
			}
			if res.Decision <= 0 || res.Total < res.Decision || res.Total > time.Since(start) {
				t.Errorf("decision %v, total %v: want 0 < decision <= total <= the call's time", res.Decision, res.Total)
			}
		})
	}
}

// TestPassThroughSendsEveryBodyBack: each body chunk comes back unchanged with its
// end_of_stream, in order, and the headers are continued.
func TestPassThroughSendsEveryBodyBack(t *testing.T) {
	c := serve(t, PassThrough{})
	st, err := c.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sent := []*extprocv3.ProcessingRequest{
		gateway.RequestHeadersMessage(gateway.FullDuplex, "POST", "/v1/completions", "h", "http", nil, true),
		gateway.RequestBodyMessage([]byte(`{"prompt":`), false),
		gateway.RequestBodyMessage([]byte(`[1,2]}`), true),
		gateway.ResponseHeadersMessage(200, nil, true),
		gateway.ResponseBodyMessage([]byte("data: [DONE]\n\n"), true),
	}
	type echoed struct {
		body string
		eos  bool
	}
	want := []any{"request headers", echoed{`{"prompt":`, false}, echoed{`[1,2]}`, true}, "response headers", echoed{"data: [DONE]\n\n", true}}
	for i, m := range sent {
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		r, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var got any
		switch v := r.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_RequestHeaders:
			got = "request headers"
		case *extprocv3.ProcessingResponse_ResponseHeaders:
			got = "response headers"
		case *extprocv3.ProcessingResponse_RequestBody:
			sr := v.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			got = echoed{string(sr.GetBody()), sr.GetEndOfStream()}
		case *extprocv3.ProcessingResponse_ResponseBody:
			sr := v.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse()
			got = echoed{string(sr.GetBody()), sr.GetEndOfStream()}
		}
		if got != want[i] {
			t.Errorf("answer %d = %#v, want %#v", i, got, want[i])
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the half-close: %v, want the stream's end", err)
	}
}

func TestRunSendsEveryArrivalAndWaitsForIt(t *testing.T) {
	c := serve(t, router{})
	var calls int
	// MaxInFlight above the window's whole count (about 100 arrivals): on a loaded host the
	// answers take hundreds of milliseconds, and none may be shed for it.
	w, err := Run(context.Background(), c, testRequest, WindowConfig{Rate: 400, Duration: 250 * time.Millisecond, Seed: 3,
		MaxInFlight: 1000, Timeout: 10 * time.Second, Progress: func(int, int) { calls++ }})
	if err != nil {
		t.Fatal(err)
	}
	if w.Sent < 40 || w.Failed != 0 || w.Shed != 0 || w.Routed != w.Sent || len(w.Totals) != w.Sent || len(w.Choices) != w.Sent {
		t.Fatalf("window %+v (totals %d): want ~100 sent, all routed and measured", w, len(w.Totals))
	}
	if calls == 0 {
		t.Error("no progress reported")
	}
}

func TestRunShedsBeyondMaxInFlight(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	c := serve(t, stall{block})
	// The timeout frees the three slots well after the window's last arrival, even when a
	// loaded -race host runs the window's loop late (it sends a late arrival at once).
	w, err := Run(context.Background(), c, testRequest, WindowConfig{Rate: 2000, Duration: 100 * time.Millisecond, Seed: 1,
		MaxInFlight: 3, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if w.Sent != 3 || w.Shed == 0 || w.Failed != 3 || len(w.Errors) == 0 {
		t.Fatalf("window %+v: want 3 sent (and timed out), the rest shed", w)
	}
}

// stall never answers until block closes.
type stall struct{ block chan struct{} }

func (s stall) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	select {
	case <-s.block:
	case <-srv.Context().Done():
	}
	return nil
}

func TestRunRefusesAnEmptyWindow(t *testing.T) {
	if _, err := Run(context.Background(), nil, testRequest, WindowConfig{Rate: 0, Duration: time.Second, MaxInFlight: 1, Timeout: time.Second}); err == nil {
		t.Fatal("a zero rate was accepted")
	}
}

func TestChildProtocol(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	stopped := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- ServeChild(context.Background(), inR, outW, func(context.Context) (string, func() error, error) {
			return "127.0.0.1:1234", func() error { close(stopped); return nil }, nil
		}, nil)
		_ = outW.Close()
	}()
	out := bufio.NewReader(outR)
	if l, _ := out.ReadString('\n'); l != "listening 127.0.0.1:1234\n" {
		t.Fatalf("first line %q", l)
	}
	var last Usage
	for range 2 {
		if _, err := io.WriteString(inW, "cpu\n"); err != nil {
			t.Fatal(err)
		}
		l, _ := out.ReadString('\n')
		u, err := parseUsage(strings.TrimSpace(l))
		if err != nil {
			t.Fatal(err)
		}
		// A running process has used some CPU and allocated; nothing goes back down.
		if u.CPU <= 0 || u.AllocBytes == 0 || u.CPU < last.CPU || u.GCCPU < last.GCCPU || u.GCs < last.GCs || u.AllocBytes < last.AllocBytes {
			t.Fatalf("usage %+v after %+v", u, last)
		}
		last = u
	}
	_ = inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the server was not stopped when stdin closed")
	}
}

// childOverPipes serves ServeChild with snapshot on pipes and returns the parent's Child
// handle on them (no process), and a function that closes stdin and returns ServeChild's error.
func childOverPipes(t *testing.T, snapshot func(string) error) (*Child, func() error) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- ServeChild(context.Background(), inR, outW, func(context.Context) (string, func() error, error) {
			return "127.0.0.1:1", func() error { return nil }, nil
		}, snapshot)
		_ = outW.Close()
	}()
	c := &Child{in: inW, out: bufio.NewReader(outR)}
	if l, _ := c.out.ReadString('\n'); l != "listening 127.0.0.1:1\n" {
		t.Fatalf("first line %q", l)
	}
	return c, func() error { _ = inW.Close(); return <-done }
}

func TestChildWritesSnapshots(t *testing.T) {
	var paths []string
	c, stop := childOverPipes(t, func(path string) error {
		if path == "/full/disk" {
			return errors.New("no space left\non device")
		}
		paths = append(paths, path)
		return nil
	})
	if err := c.Snapshot("/tmp/a b.trace"); err != nil {
		t.Fatal(err)
	}
	err := c.Snapshot("/full/disk")
	if err == nil || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "/full/disk") {
		t.Fatalf("a failed snapshot: err = %v, want the child's reason on one line and the path", err)
	}
	if err := c.Snapshot("two\nlines"); err == nil || !strings.Contains(err.Error(), "line break") {
		t.Fatalf("a path with a line break: err = %v", err)
	}
	if _, err := c.Usage(); err != nil { // the protocol is still in step after the errors
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(paths, []string{"/tmp/a b.trace"}) {
		t.Fatalf("snapshots written to %q", paths)
	}
}

func TestChildWithoutSnapshotsSaysHowToGetThem(t *testing.T) {
	c, stop := childOverPipes(t, nil)
	if err := c.Snapshot("/tmp/x"); err == nil || !strings.Contains(err.Error(), "-flight") {
		t.Fatalf("err = %v, want it to name -flight", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestChildRefusesAnUnknownRequest(t *testing.T) {
	err := ServeChild(context.Background(), strings.NewReader("memory\n"), io.Discard, func(context.Context) (string, func() error, error) {
		return "a", func() error { return nil }, nil
	}, nil)
	if err == nil || !strings.Contains(err.Error(), `unknown request "memory"`) {
		t.Fatalf("err = %v", err)
	}
	wantErr := errors.New("port taken")
	if err := ServeChild(context.Background(), strings.NewReader(""), io.Discard, func(context.Context) (string, func() error, error) {
		return "", nil, wantErr
	}, nil); !errors.Is(err, wantErr) {
		t.Fatalf("err = %v, want the start error", err)
	}
}

// ms is the durations of v milliseconds.
func ms(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

func TestReportComparesAtEachRate(t *testing.T) {
	arms := []Arm{
		{Server: "floor", Rate: 500, Window: Window{Sent: 4, Totals: ms(1, 1, 1, 1), Choices: ms(0.5, 0.5, 0.5, 0.5)}, CPU: 400 * time.Microsecond},
		{Server: "higher floor", Rate: 500, Window: Window{Sent: 4, Totals: ms(1.6, 1.6, 1.6, 1.6), Choices: ms(1, 1, 1, 1)}, CPU: 720 * time.Microsecond},
		{Server: "ours", Rate: 500, Window: Window{Sent: 4, Routed: 4, Totals: ms(2, 2, 2, 2), Choices: ms(1, 1, 1, 1)}, CPU: 800 * time.Microsecond},
		{Server: "ours", Rate: 100, Window: Window{Sent: 1, Totals: ms(1)}, CPU: time.Millisecond}, // no floor at 100: not compared
	}
	cs := Compare(arms, "ours", "floor")
	if len(cs) != 1 {
		t.Fatalf("%d comparisons, want 1 (only 500/s has both servers)", len(cs))
	}
	c := cs[0]
	if c.Rate != 500 || c.P50Ratio != 2 || c.P99Ratio != 2 || c.CPUExtra != 100*time.Microsecond || c.CPURatio != 2 || c.Routed != 4 {
		t.Fatalf("comparison %+v", c)
	}
	var b bytes.Buffer
	if err := WriteReport(&b, arms, "ours", []string{"floor", "higher floor"}, 1.3, 50*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	// Each floor gets its own table, in the order given: against the higher floor the
	// ratios are 1.25 and 1.11, and the extra CPU 20 µs, each within its target.
	// With one round there is no interval: "-" in both of its columns.
	want := `(?s)ours against floor, same run:\n.*?\n\s*500\s+2\.00\s+2\.00\s+false\s+-\s+-\s+2\.00\s+100\.0\s+false\n` +
		`\nours against higher floor, same run:\n.*?\n\s*500\s+1\.25\s+1\.25\s+true\s+-\s+-\s+1\.11\s+20\.0\s+true\n`
	if !regexp.MustCompile(want).MatchString(b.String()) {
		t.Fatalf("report:\n%s", b.String())
	}
}

func TestPoolMergesTheSameServerAndRate(t *testing.T) {
	a := Arm{Server: "s", Rate: 500, Window: Window{Sent: 2, Totals: []time.Duration{1, 2}, Errors: map[string]int{"x": 1}}, CPU: 10}
	b := Arm{Server: "s", Rate: 500, Window: Window{Sent: 3, Failed: 1, Totals: []time.Duration{3, 4}, Errors: map[string]int{"x": 2}}, CPU: 20}
	c := Arm{Server: "s", Rate: 1000, Window: Window{Sent: 1}}
	arms := Pool(Pool(Pool(nil, a), c), b)
	if len(arms) != 2 {
		t.Fatalf("%d arms, want 2 (one per rate)", len(arms))
	}
	p := arms[0]
	if p.Window.Sent != 5 || p.Window.Failed != 1 || len(p.Window.Totals) != 4 || p.Window.Errors["x"] != 3 || p.CPU != 30 || p.CPUPerRequest() != 6 {
		t.Fatalf("pooled %+v", p)
	}
	if len(p.Rounds) != 2 || !slices.Equal(p.Rounds[0], a.Window.Totals) || !slices.Equal(p.Rounds[1], b.Window.Totals) {
		t.Fatalf("pooled rounds %v, want each window's round trips in the order pooled", p.Rounds)
	}
}

// TestPooledPercentileIsThePercentileOfThePool holds the top-values shortcut to
// stats.Percentile of the concatenated rounds, with rounds drawn more than once, of
// unequal and tiny sizes, and percentiles on and between ranks.
func TestPooledPercentileIsThePercentileOfThePool(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for trial := range 300 {
		rounds := make([][]float64, 1+rng.IntN(6))
		for i := range rounds {
			rounds[i] = make([]float64, rng.IntN(40))
			for j := range rounds[i] {
				rounds[i][j] = float64(rng.IntN(50)) // ties too
			}
			slices.Sort(rounds[i])
		}
		pick := make([]float64, 1+rng.IntN(8))
		var pool []float64
		for k := range pick {
			pick[k] = float64(rng.IntN(len(rounds)))
			pool = append(pool, rounds[int(pick[k])]...)
		}
		for _, p := range []float64{0, 50, 90, 99, 99.9, 100} {
			got, _ := pooledPercentile(rounds, pick, p, nil)
			want := stats.Percentile(pool, p)
			if len(pool) == 0 {
				if !math.IsNaN(got) {
					t.Fatalf("trial %d: p%v of an empty pool = %v, want NaN", trial, p, got)
				}
				continue
			}
			if math.Abs(got-want) > 1e-9 {
				t.Fatalf("trial %d: p%v of %v picked %v = %v, want %v", trial, p, rounds, pick, got, want)
			}
		}
	}
}

// TestP99RatioCI checks the rounds' bootstrap interval: a server exactly twice the floor
// in every round is [2, 2] however the rounds drift; servers alike but for the rounds'
// drift straddle 1; too few or unpaired rounds give none.
func TestP99RatioCI(t *testing.T) {
	round := func(scale float64, n int) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = time.Duration(scale * float64(i+1) * float64(time.Microsecond))
		}
		return out
	}
	var floor, twice, alike [][]time.Duration
	for r := range 8 {
		drift := 1 + float64(r%4)/2 // the machine's speed by round: 1, 1.5, 2, 2.5
		floor = append(floor, round(drift, 200))
		twice = append(twice, round(2*drift, 200))
		alike = append(alike, round([]float64{1, 2.5, 1.5, 2}[r%4], 200)) // same drifts, other rounds
	}
	cases := []struct {
		name          string
		server, floor [][]time.Duration
		ok            bool
		lo, hi        float64 // bounds the interval must lie within
		straddles     float64 // a ratio the interval must straddle, when set
	}{
		{name: "twice in every round", server: twice, floor: floor, ok: true, lo: 2 - 1e-9, hi: 2 + 1e-9},
		{name: "alike but for drift", server: alike, floor: floor, ok: true, lo: 0.3, hi: 3, straddles: 1},
		{name: "too few rounds", server: twice[:MinCIRounds-1], floor: floor[:MinCIRounds-1]},
		{name: "unpaired rounds", server: twice[:5], floor: floor[:4]},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			iv, ok := p99RatioCI(c.server, c.floor, 1)
			if ok != c.ok {
				t.Fatalf("ok %v, want %v", ok, c.ok)
			}
			if !ok {
				return
			}
			if iv.Lo < c.lo || iv.Hi > c.hi || iv.Lo > iv.Hi || iv.Level != CILevel {
				t.Fatalf("interval %+v, want within [%v, %v]", iv, c.lo, c.hi)
			}
			if c.straddles > 0 && !(iv.Lo < c.straddles && iv.Hi > c.straddles) {
				t.Fatalf("interval %+v does not straddle %v", iv, c.straddles)
			}
		})
	}
}

func TestCIVerdict(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		want   string
	}{{1.0, 1.2, "yes"}, {1.0, 1.3, "yes"}, {1.2, 1.4, "unclear"}, {1.3, 1.5, "unclear"}, {1.31, 1.5, "no"}} {
		if got := ciVerdict(stats.Interval{Lo: c.lo, Hi: c.hi}, 1.3); got != c.want {
			t.Errorf("[%v, %v] against 1.3: %q, want %q", c.lo, c.hi, got, c.want)
		}
	}
}

func TestStallsNameTheWindowsWithALongRoundTrip(t *testing.T) {
	var arms []Arm
	for _, w := range [][]time.Duration{ms(1, 2), ms(3, 90), ms(1, 1), ms(60, 1), ms()} {
		arms = Pool(arms, Arm{Server: "ours", Rate: 2000, Window: Window{Totals: w}})
	}
	arms = Pool(arms, Arm{Server: "floor", Rate: 2000, Window: Window{Totals: ms(5, 5)}})
	// A later round with the longer stall: listed first.
	for _, w := range [][]time.Duration{ms(55), ms(2), ms(80)} {
		arms = Pool(arms, Arm{Server: "pass", Rate: 2000, Window: Window{Totals: w}})
	}
	got := Stalls(arms, 50*time.Millisecond)
	if len(got) != 3 {
		t.Fatalf("%d summaries, want one per arm", len(got))
	}
	ours, floor := got[0], got[1]
	if want := []Stall{{Round: 2, Longest: ms(80)[0]}, {Round: 0, Longest: ms(55)[0]}}; !slices.Equal(got[2].Stalled, want) {
		t.Fatalf("pass: stalls %+v, want the longest first: %+v", got[2].Stalled, want)
	}
	if want := []Stall{{Round: 1, Longest: ms(90)[0]}, {Round: 3, Longest: ms(60)[0]}}; ours.Windows != 4 || !slices.Equal(ours.Stalled, want) {
		t.Fatalf("ours: %+v, want 4 windows with round trips (the empty one skipped), stalls in rounds 1 and 3", ours)
	}
	// Window p99s: 1.99, 89.13, 1, 59.41; their median is (1.99+59.41)/2.
	if want := 30.7 * float64(time.Millisecond); math.Abs(float64(ours.MedianP99)-want) > 0.01*want {
		t.Fatalf("median window p99 %v, want about 30.7ms", ours.MedianP99)
	}
	if floor.Windows != 1 || len(floor.Stalled) != 0 || floor.MedianP99 != 5*time.Millisecond {
		t.Fatalf("floor: %+v", floor)
	}
	var b strings.Builder
	if err := WriteStalls(&b, arms, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "90.0 (1), 60.0 (3)") || !strings.Contains(b.String(), "80.0 (2), 55.0 (0)") || !strings.Contains(b.String(), "floor") {
		t.Fatalf("report lists stalls longest first with their rounds:\n%s", b.String())
	}
}

func TestParseUsageNamesABadAnswer(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Usage
		ok   bool
	}{
		{line: "cpu 5 gc-cpu 2 gcs 3 alloc-bytes 4096", want: Usage{CPU: 5, GCCPU: 2, GCs: 3, AllocBytes: 4096}, ok: true},
		{line: "cpu 5"},
		{line: "cpu -5 gc-cpu 2 gcs 3 alloc-bytes 4096"},
		{line: "cpu 5 gc-cpu x gcs 3 alloc-bytes 4096"},
		{line: "memory 5 gc-cpu 2 gcs 3 alloc-bytes 4096"},
		{line: ""},
	} {
		u, err := parseUsage(tc.line)
		if tc.ok != (err == nil) || u != tc.want {
			t.Errorf("parseUsage(%q) = %+v, %v", tc.line, u, err)
		}
		if err != nil && !strings.Contains(err.Error(), strconv.Quote(tc.line)) {
			t.Errorf("parseUsage(%q): the error %q does not quote the answer", tc.line, err)
		}
	}
	if d := (Usage{CPU: 9, GCCPU: 4, GCs: 7, AllocBytes: 100}).Sub(Usage{CPU: 2, GCCPU: 1, GCs: 3, AllocBytes: 40}); d != (Usage{CPU: 7, GCCPU: 3, GCs: 4, AllocBytes: 60}) {
		t.Errorf("Sub = %+v", d)
	}
}

func TestReportShowsTheCollectorAndTheGenerator(t *testing.T) {
	a := Arm{Server: "ours", Rate: 100,
		Window: Window{Sent: 4, Elapsed: 2 * time.Second, Totals: []time.Duration{time.Millisecond}, Choices: []time.Duration{time.Millisecond}},
		CPU:    800 * time.Microsecond, GCCPU: 40 * time.Microsecond, GCs: 6, AllocBytes: 4 * 3072,
		GeneratorCPU: 500 * time.Millisecond}
	if got := a.GeneratorLoad(); got != 0.25 {
		t.Fatalf("GeneratorLoad = %v, want 0.25 (0.5 s of CPU over 2 s)", got)
	}
	// Pooling sums every count, so the per-request figures stay those of one window here.
	p := Pool(Pool(nil, a), a)[0]
	if p.GCCPU != 80*time.Microsecond || p.GCs != 12 || p.AllocBytes != 8*3072 || p.GeneratorCPU != time.Second || p.GeneratorLoad() != 0.25 {
		t.Fatalf("pooled %+v", p)
	}
	var b strings.Builder
	if err := WriteReport(&b, []Arm{p}, "ours", nil, 1.3, 100*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	// CPU/request 200 µs, GC 10 µs, 3 GCs/s, 3 KB allocated, generator 125000 µs and 25%.
	if !regexp.MustCompile(`(?m)^\s*100\s+ours\s+8\s+0\s+0\s+0(\s+[\d.]+){5}\s+200\.0\s+10\.0\s+3\.0\s+3\.0\s+125000\.0\s+25%$`).MatchString(b.String()) {
		t.Fatalf("report row:\n%s", b.String())
	}
}

func TestRoundRatiosPairTheSameRounds(t *testing.T) {
	pool := func(arms []Arm, server string, rate float64, windows ...[]time.Duration) []Arm {
		for _, w := range windows {
			arms = Pool(arms, Arm{Server: server, Rate: rate, Window: Window{Totals: w}})
		}
		return arms
	}
	for _, tc := range []struct {
		name          string
		ours, floor   [][]time.Duration
		rounds        int
		median        float64
		hasCI, within bool
	}{
		// Per round 2, 3, 1.5 and a stall of 100: the median is 2.5 however long the stall.
		{name: "a stalled round moves the median by a rank", ours: [][]time.Duration{ms(2, 2), ms(3, 3), ms(3, 3), ms(500, 500)},
			floor: [][]time.Duration{ms(1, 1), ms(1, 1), ms(2, 2), ms(5, 5)}, rounds: 4, median: 2.5, hasCI: true},
		// A round against the floor's empty window is skipped; two pairs give no interval.
		{name: "too few pairs for an interval", ours: [][]time.Duration{ms(1, 1), ms(4, 4), ms(2, 2)},
			floor: [][]time.Duration{ms(1, 1), ms(), ms(2, 2)}, rounds: 2, median: 1},
		{name: "within the target", ours: [][]time.Duration{ms(10, 10), ms(11, 11), ms(12, 12)},
			floor: [][]time.Duration{ms(10, 10), ms(10, 10), ms(10, 10)}, rounds: 3, median: 1.1, hasCI: true, within: true},
		{name: "rounds that do not pair", ours: [][]time.Duration{ms(1), ms(1), ms(1)}, floor: [][]time.Duration{ms(1), ms(1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arms := pool(nil, "ours", 2000, tc.ours...)
			arms = pool(arms, "floor", 2000, tc.floor...)
			arms = pool(arms, "ours", 500, ms(1)) // another rate, with no floor: no ratio
			got := RoundRatios(arms, "ours", "floor")
			if tc.rounds == 0 {
				if len(got) != 0 {
					t.Fatalf("%+v, want no ratio", got)
				}
				return
			}
			if len(got) != 1 || got[0].Rate != 2000 || got[0].Rounds != tc.rounds || math.Abs(got[0].Median-tc.median) > 1e-9 || got[0].HasCI != tc.hasCI {
				t.Fatalf("%+v, want rate 2000, %d rounds, median %v, interval %v", got, tc.rounds, tc.median, tc.hasCI)
			}
			if tc.hasCI && (got[0].CI.Lo > got[0].Median || got[0].CI.Hi < got[0].Median || (got[0].CI.Hi <= 1.3) != tc.within) {
				t.Fatalf("interval %+v around median %v, within 1.3: want %v", got[0].CI, got[0].Median, tc.within)
			}
			var b strings.Builder
			if err := WriteRoundRatios(&b, arms, "ours", []string{"floor"}, 1.3); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("2000    floor  %d       %.2f", tc.rounds, tc.median); !strings.Contains(b.String(), want) {
				t.Fatalf("report lacks %q:\n%s", want, b.String())
			}
		})
	}
}
