package app

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/tokenbucket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func dialExtProc(t *testing.T, a *App) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// sendBody sends one full-duplex /v1/completions request whose body is size bytes, in
// 256 KiB chunks, and returns where it was routed.
func sendBody(ctx context.Context, conn *grpc.ClientConn, size int) (string, error) {
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return "", err
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}}}}}); err != nil {
		return "", err
	}
	head, tail := `{"model":"m","prompt":"`, `"}`
	body := []byte(head + strings.Repeat("a", size-len(head)-len(tail)) + tail)
	for off := 0; off < len(body); off += 256 << 10 {
		end := min(off+256<<10, len(body))
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
			Body: body[off:end], EndOfStream: end == len(body)}}}); err != nil {
			return "", err
		}
	}
	r, err := st.Recv()
	if err != nil {
		return "", err
	}
	if ir := r.GetImmediateResponse(); ir != nil {
		return "", io.ErrUnexpectedEOF
	}
	_ = st.CloseSend()
	return r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue(), nil
}

// A large body on a connection sending faster than --grpc-conn-read-rate is slowed to it
// (it takes at least its excess over the burst divided by the rate), while a small request
// on the same connection, and one on another connection, are routed meanwhile.
func TestConnReadRateSlowsLargeBodiesOnly(t *testing.T) {
	// The large body takes about a second (half of one at 2 MiB/s): the two small requests
	// must be answered inside it, which leaves room for a loaded -race host.
	const rate, burst, size = 1 << 20, 256 << 10, 1280 << 10
	// Chunks are processed only once the connection is out of debt, the last one too;
	// allow for one gRPC read buffer (32 KiB) not yet charged.
	least := time.Duration(float64(size-burst-32<<10) / rate * float64(time.Second))
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, ConnReadRate: rate, ConnReadBurst: burst})
	slow, other := dialExtProc(t, a), dialExtProc(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		dest string
		took time.Duration
		err  error
	}
	done := make(chan result, 1)
	go func() {
		begin := time.Now()
		dest, err := sendBody(ctx, slow, size)
		done <- result{dest, time.Since(begin), err}
	}()
	for testutil.ToFloat64(a.connRate.slowed) == 0 { // the large body is being held back
		select {
		case r := <-done:
			if r.err == nil && r.took >= least {
				// A bucket refills with wall time: a host too loaded to send faster than the
				// rate is never slowed, rightly. Only a fast send that was not slowed fails.
				t.Skipf("a %d-byte body took %v unslowed, no faster than %d bytes/s allow (%v): this host was too loaded to go over the rate", size, r.took, rate, least)
			}
			t.Fatalf("a %d-byte body over a %d-byte burst finished (%v, %v) without its connection being slowed", size, burst, r.took, r.err)
		case <-time.After(time.Millisecond):
		}
	}
	for name, conn := range map[string]*grpc.ClientConn{"the same connection": slow, "another connection": other} {
		begin := time.Now()
		if dest, err := routeOnce(conn); err != nil || dest != "10.0.0.1:8000" {
			t.Fatalf("a small request on %s while a large body is slowed: %q, %v", name, dest, err)
		}
		select {
		case r := <-done:
			t.Fatalf("the large body finished (%v) before the small request on %s was answered (%v): the test shows nothing", r.took, name, time.Since(begin))
		default:
		}
	}
	r := <-done
	if r.err != nil || r.dest != "10.0.0.1:8000" {
		t.Fatalf("the slowed request was not routed: %q, %v", r.dest, r.err)
	}
	if r.took < least {
		t.Errorf("%d bytes at %d bytes/s with a %d-byte burst took %v, under %v: the rate is not enforced", size, rate, burst, r.took, least)
	}
	if w := testutil.ToFloat64(a.connRate.waited); w <= 0 {
		t.Errorf("loadaware_extproc_read_rate_wait_seconds_total %v after a slowed connection", w)
	}
}

// Under the defaults a request body of the largest allowed size (16 MiB) is read without
// waiting.
func TestConnReadRateDefaultsPassALargestBody(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}})
	// A failure bound only: under the default burst (32 MiB) nothing here waits on the rate,
	// but a starved -race host took over 30 s to carry the 16 MiB (3 runs of 3 beside CPU
	// burners, the whole package running).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if dest, err := sendBody(ctx, dialExtProc(t, a), 16<<20); err != nil || dest != "10.0.0.1:8000" {
		t.Fatalf("a 16 MiB body: %q, %v", dest, err)
	}
	if w, n := testutil.ToFloat64(a.connRate.waited), testutil.ToFloat64(a.connRate.slowed); w != 0 || n != 0 {
		t.Errorf("a 16 MiB body under the default read rate waited %vs (%v connections slowed)", w, n)
	}
}

// The two levels of debt: a large stream waits for any debt, Read only for the debt past one
// burst, each for that debt at the rate; the first wait is noted once.
func TestRateConnWaits(t *testing.T) {
	const rate, burst = 1 << 10, 1 << 10 // a KiB a second: the refill during the test is negligible
	r, err := newConnRate(rate, burst, burst, newExtConns(), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tokens          float64
		delay, readWait time.Duration
	}{
		{burst, 0, 0},
		{0, 0, 0},
		{-512, 500 * time.Millisecond, 0},
		{-burst, time.Second, 0},
		{-2 * burst, 2 * time.Second, time.Second},
	} {
		began := time.Now()
		c := &extConn{read: r, bytes: holding(rate, burst, tc.tokens), closed: make(chan struct{})}
		if got := c.Delay(); !refilledNear(got, tc.delay, time.Since(began)) && !(tc.delay == 0 && got == 0) {
			t.Errorf("tokens %v: Delay %v, want %v", tc.tokens, got, tc.delay)
		}
		began = time.Now()
		c.bytes = holding(rate, burst, tc.tokens)
		if got := c.owed(-burst); !refilledNear(got, tc.readWait, time.Since(began)) && !(tc.readWait == 0 && got == 0) {
			t.Errorf("tokens %v: Read waits %v, want %v", tc.tokens, got, tc.readWait)
		}
	}
	if n := testutil.ToFloat64(r.slowed); n != 3 {
		t.Errorf("%v connections counted as slowed, want 3 (each once)", n)
	}
}

// With a burst of several largest bodies, a large stream waits once the connection's large
// bodies are one largest body (and its framing) ahead of the rate, and the wait is counted
// as a body-burst wait while the connection is not in debt; Read still waits only past
// one burst of debt.
func TestRateConnBodyBurst(t *testing.T) {
	const rate, burst, maxBody = 1 << 10, 4 << 10, 1 << 10 // a KiB a second; one body 1,040 bytes with its framing
	r, err := newConnRate(rate, burst, maxBody, newExtConns(), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	const floor = burst - maxBody - maxBody/framingShare // 3,056 tokens
	for _, tc := range []struct {
		tokens          float64
		delay, readWait time.Duration
		bodyWait        bool
	}{
		{burst, 0, 0, false},
		{floor, 0, 0, false},
		{floor - 512, 500 * time.Millisecond, 0, true},
		{0, floor * time.Second / rate, 0, true},
		{-1024, (floor + 1024) * time.Second / rate, 0, false},
		{-burst - 1024, (floor + burst + 1024) * time.Second / rate, time.Second, false},
	} {
		before := testutil.ToFloat64(r.bodyWaits)
		began := time.Now()
		c := &extConn{read: r, bytes: holding(rate, burst, tc.tokens), closed: make(chan struct{})}
		if got := c.Delay(); !refilledNear(got, tc.delay, time.Since(began)) && !(tc.delay == 0 && got == 0) {
			t.Errorf("tokens %v: Delay %v, want %v", tc.tokens, got, tc.delay)
		}
		if got := testutil.ToFloat64(r.bodyWaits) - before; got != map[bool]float64{true: 1}[tc.bodyWait] {
			t.Errorf("tokens %v: %v body-burst waits counted, want %v", tc.tokens, got, tc.bodyWait)
		}
		began = time.Now()
		c.bytes = holding(rate, burst, tc.tokens)
		if got := c.owed(-burst); !refilledNear(got, tc.readWait, time.Since(began)) && !(tc.readWait == 0 && got == 0) {
			t.Errorf("tokens %v: Read waits %v, want %v", tc.tokens, got, tc.readWait)
		}
	}
}

// refilledNear says whether a wait got is want less the refill of the time passed between
// filling the bucket and asking (measured around both: a loaded host may take long).
func refilledNear(got, want, passed time.Duration) bool {
	return got <= want && got >= want-passed-time.Millisecond
}

// holding returns a bucket of rate and burst that holds tokens now.
func holding(rate, burst, tokens float64) tokenbucket.Bucket {
	b := tokenbucket.New(rate, burst, time.Now())
	b.Take(burst - tokens)
	return b
}
