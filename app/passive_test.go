package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/internal/testnet"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// engine is an HTTP server on a loopback port answering 200 to everything. After kill the
// port refuses connections for the rest of the test (no parallel test's server can take it).
func engine(t *testing.T) (addr string, kill func()) {
	t.Helper()
	lis := testnet.Listen(t, "127.0.0.1")
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }),
		ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Close() })
	// kill closes the listener itself too: srv.Close closes only the listeners Serve has
	// begun tracking, and a kill that runs before the goroutine reaches Serve would leave the
	// port listening until it does, so a check sent meanwhile is accepted and then reset,
	// not refused.
	return lis.Addr().String(), func() { _ = srv.Close(); _ = lis.Close() }
}

// envoyRequest plays one request as Envoy does: header-only request headers to the picker,
// the request to the endpoint it names, and the upstream's status in the response phase:
// Envoy's own 503 local reply when the connection is refused. It returns the endpoint.
func envoyRequest(t *testing.T, c extprocv3.ExternalProcessorClient, hc *http.Client) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hdr := func(kv ...string) *corev3.HeaderMap {
		m := &corev3.HeaderMap{}
		for i := 0; i < len(kv); i += 2 {
			m.Headers = append(m.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
		}
		return m
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: hdr(":method", "GET", ":path", "/v1/models"), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	set := r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()
	if len(set) == 0 || set[0].GetHeader().GetKey() != extproc.DestinationHeader {
		t.Fatalf("no destination in %v", r)
	}
	ep := string(set[0].GetHeader().GetRawValue())
	code := http.StatusServiceUnavailable
	resp, err := hc.Get("http://" + ep + "/v1/models")
	switch {
	case err == nil:
		code = resp.StatusCode
		resp.Body.Close()
	case !errors.Is(err, syscall.ECONNREFUSED):
		t.Fatalf("engine %s: %v", ep, err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: hdr(":status", strconv.Itoa(code)), EndOfStream: true}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	_ = st.CloseSend()
	return ep
}

// TestKilledEngineLeavesTheNextDecision is issue 35's engine-killed row on the real server
// with the static mode's default health settings (checks every 250 ms): two engines
// round-robin, one is killed, and of the next 20 requests at most one goes to it: the first
// failed response phase (Envoy's 503 for the refused connect) ejects it for 1 s, and the
// refused checks keep it out (with two failures needed, as before, two went to it).
func TestKilledEngineLeavesTheNextDecision(t *testing.T) {
	live, _ := engine(t)
	dead, kill := engine(t)
	a := start(t, Config{Endpoints: []string{live, dead}, Policy: "roundrobin",
		Health: HealthConfig{CheckInterval: 250 * time.Millisecond}})
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := extprocv3.NewExternalProcessorClient(conn)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	seen := map[string]bool{}
	for range 4 { // both engines serve before the kill
		seen[envoyRequest(t, c, hc)] = true
	}
	if !seen[live] || !seen[dead] {
		t.Fatalf("before the kill the requests went to %v, want both engines", seen)
	}
	kill()
	toDead := 0
	for range 20 {
		if envoyRequest(t, c, hc) == dead {
			toDead++
		}
	}
	if toDead > 1 {
		t.Fatalf("%d of the 20 requests after the kill went to the killed engine, want at most 1", toDead)
	}
}

// A health check refused by the endpoint ejects it at once, for the passive ejection's time,
// where a failed check alone needs ActiveFailures in a row.
func TestRefusedCheckEjectsAtOnce(t *testing.T) {
	live, _ := engine(t)
	dead, kill := engine(t)
	kill()
	now := time.Unix(1000, 0)
	w, err := newHealthWatch(HealthConfig{Now: func() time.Time { return now }}, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer w.client.CloseIdleConnections()
	ctx := context.Background()
	w.checkOne(ctx, live)
	w.checkOne(ctx, dead)
	if !w.h.Healthy(live, now) || w.h.Healthy(dead, now) {
		t.Fatalf("after one check: live healthy %v, refused healthy %v; want true, false", w.h.Healthy(live, now), w.h.Healthy(dead, now))
	}
	slow := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) }),
		ReadHeaderTimeout: time.Second}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = slow.Serve(lis) }()
	defer slow.Close()
	w.checkOne(ctx, lis.Addr().String())
	if !w.h.Healthy(lis.Addr().String(), now) {
		t.Fatal("one failed (not refused) check ejected the endpoint: want ActiveFailures (2) in a row")
	}
	if !w.h.Healthy(dead, now.Add(time.Second)) {
		t.Fatal("the refused endpoint is still out after the ejection (1 s): want it back, as after any passive ejection")
	}
}
