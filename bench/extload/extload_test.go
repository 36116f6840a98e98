package extload

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
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

// serve runs srv on a loopback port and returns a client of it.
func serve(t *testing.T, srv extprocv3.ExternalProcessorServer) extprocv3.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, srv)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
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
	w, err := Run(context.Background(), c, testRequest, WindowConfig{Rate: 400, Duration: 250 * time.Millisecond, Seed: 3,
		MaxInFlight: 64, Timeout: 5 * time.Second, Progress: func(int, int) { calls++ }})
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
	w, err := Run(context.Background(), c, testRequest, WindowConfig{Rate: 2000, Duration: 100 * time.Millisecond, Seed: 1,
		MaxInFlight: 3, Timeout: 150 * time.Millisecond})
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
		})
		_ = outW.Close()
	}()
	out := bufio.NewReader(outR)
	if l, _ := out.ReadString('\n'); l != "listening 127.0.0.1:1234\n" {
		t.Fatalf("first line %q", l)
	}
	var last string
	for range 2 {
		if _, err := io.WriteString(inW, "cpu\n"); err != nil {
			t.Fatal(err)
		}
		l, _ := out.ReadString('\n')
		if !strings.HasPrefix(l, "cpu ") || l <= last && len(l) <= len(last) {
			t.Fatalf("cpu answer %q after %q", l, last)
		}
		last = l
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

func TestChildRefusesAnUnknownRequest(t *testing.T) {
	err := ServeChild(context.Background(), strings.NewReader("memory\n"), io.Discard, func(context.Context) (string, func() error, error) {
		return "a", func() error { return nil }, nil
	})
	if err == nil || !strings.Contains(err.Error(), `unknown request "memory"`) {
		t.Fatalf("err = %v", err)
	}
	wantErr := errors.New("port taken")
	if err := ServeChild(context.Background(), strings.NewReader(""), io.Discard, func(context.Context) (string, func() error, error) {
		return "", nil, wantErr
	}); !errors.Is(err, wantErr) {
		t.Fatalf("err = %v, want the start error", err)
	}
}

func TestReportComparesAtEachRate(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x * float64(time.Millisecond))
		}
		return out
	}
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
