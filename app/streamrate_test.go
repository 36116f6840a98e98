package app

import (
	"context"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The stream bucket admits a burst at once, then one stream per 1/rate; a refusal makes
// the next read wait until a stream would be admitted, once.
func TestStreamBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type step struct {
		at       time.Time
		admit    bool // else: wait
		want     bool
		wantWait time.Duration
	}
	for _, c := range []struct {
		name        string
		rate, burst float64
		steps       []step
	}{
		{"burst then refused", 10, 2, []step{
			{at: t0, admit: true, want: true}, {at: t0, admit: true, want: true}, {at: t0, admit: true, want: false},
			{at: t0, wantWait: 100 * time.Millisecond}, {at: t0}, // the second read after a refusal does not wait
		}},
		{"refills at the rate", 10, 1, []step{
			{at: t0, admit: true, want: true}, {at: ms(50), admit: true, want: false},
			{at: ms(50), wantWait: 50 * time.Millisecond}, {at: ms(100), admit: true, want: true},
		}},
		{"no refusal, no wait", 10, 1, []step{
			{at: t0, admit: true, want: true}, {at: t0}, {at: ms(10)},
		}},
		{"the burst caps what an idle connection saves", 100, 3, []step{
			{at: ms(10_000), admit: true, want: true}, {at: ms(10_000), admit: true, want: true},
			{at: ms(10_000), admit: true, want: true}, {at: ms(10_000), admit: true, want: false},
			{at: ms(10_005), wantWait: 5 * time.Millisecond},
		}},
		{"the wait is measured when the read comes", 10, 1, []step{
			{at: t0, admit: true, want: true}, {at: ms(10), admit: true, want: false}, {at: ms(120)},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newStreamBucket(c.rate, c.burst, t0)
			for i, s := range c.steps {
				if s.admit {
					if got := b.admit(s.at); got != s.want {
						t.Fatalf("step %d: admit = %v, want %v", i, got, s.want)
					}
					continue
				}
				if got := b.wait(s.at); got.Round(time.Millisecond) != s.wantWait {
					t.Fatalf("step %d: wait = %v, want %v", i, got, s.wantWait)
				}
			}
		})
	}
}

// One connection opening streams back to back past --grpc-conn-stream-rate gets
// RESOURCE_EXHAUSTED naming the flag (counted), while a connection at a steady rate below
// it, at the same time, is never refused.
func TestConnStreamRateRefusesAFloodOnly(t *testing.T) {
	const rate, burst = 50, 10
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, ConnStreamRate: rate, ConnStreamBurst: burst})
	flood, steady := dialExtProc(t, a), dialExtProc(t, a)
	stop := make(chan struct{})
	steadyErr := make(chan error, 1)
	go func() { // 20 streams/s, under the rate: Envoy's worker carrying real traffic
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				steadyErr <- nil
				return
			case <-tick.C:
			}
			if _, err := routeOnce(steady); err != nil {
				steadyErr <- err
				return
			}
		}
	}()
	var routed, refused int
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		err := openOnce(flood)
		switch status.Code(err) {
		case codes.OK:
			routed++
		case codes.ResourceExhausted:
			refused++
			if s := status.Convert(err).Message(); !containsAll(s, "--grpc-conn-stream-rate") {
				t.Fatalf("the refusal does not name the flag: %q", s)
			}
		default:
			t.Fatalf("a flood stream failed otherwise: %v", err)
		}
	}
	close(stop)
	if err := <-steadyErr; err != nil {
		t.Fatalf("the steady connection was refused: %v", err)
	}
	// A second at 50/s after a burst of 10: at most 60 admitted, with slack for a slow host.
	if refused == 0 || routed > burst+rate+rate/2 {
		t.Fatalf("flood: %d routed, %d refused; want refusals and at most about %d routed", routed, refused, burst+rate)
	}
	if got := testutil.ToFloat64(a.streamRate.refused); int(got) != refused {
		t.Fatalf("loadaware_extproc_stream_rate_refused_total = %v, want %d", got, refused)
	}
}

// With the rate off (-1) nothing is refused.
func TestConnStreamRateOff(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, ConnStreamRate: -1})
	if a.streamRate != nil {
		t.Fatal("ConnStreamRate -1 still limits streams")
	}
	conn := dialExtProc(t, a)
	for i := range 50 {
		if _, err := routeOnce(conn); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
}

// openOnce sends one header-only request over conn and returns the stream's error: the
// refusal's status whether it comes at the send or the receive.
func openOnce(conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return err
	}
	_ = st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/models")}}}}}})
	if _, err := st.Recv(); err != nil { // a failed send's cause is the stream's status
		return err
	}
	_ = st.CloseSend()
	_, _ = st.Recv()
	return nil
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
