package app

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// routeOnce sends one header-only request over conn and returns where it was routed.
func routeOnce(conn *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
	if err != nil {
		return "", err
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/models")}}}}}}); err != nil {
		return "", err
	}
	r, err := st.Recv()
	if err != nil {
		return "", err
	}
	_ = st.CloseSend()
	_, _ = st.Recv()
	return r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue(), nil
}

// writeCA makes a CA and a client certificate it signs, as PEM files in dir.
func writeCA(t *testing.T, dir string) (caFile string, client tls.Certificate) {
	t.Helper()
	mk := func(tmpl, parent *x509.Certificate, signer *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		if parent == nil {
			parent, signer = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, key
	}
	now := time.Now()
	ca, caKey := mk(&x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, nil, nil)
	cl, clKey := mk(&x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "envoy"}, NotBefore: now.Add(-time.Hour),
		NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, caKey)
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, tls.Certificate{Certificate: [][]byte{cl.Raw}, PrivateKey: clKey}
}

func TestMutualTLS(t *testing.T) {
	caFile, clientCert := writeCA(t, t.TempDir())
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, SecureServing: true, ClientCA: caFile})
	dial := func(certs []tls.Certificate) *grpc.ClientConn {
		conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, Certificates: certs})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	if dest, err := routeOnce(dial(nil)); err == nil {
		t.Fatalf("a client without a certificate was served (routed to %q)", dest)
	}
	if dest, err := routeOnce(dial([]tls.Certificate{clientCert})); err != nil || dest != "10.0.0.1:8000" {
		t.Fatalf("a client with a certificate signed by --client-ca: %q, %v", dest, err)
	}
	if _, err := Start(context.Background(), Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0", SecureServing: true,
		ClientCA: filepath.Join(t.TempDir(), "missing.pem")}, nil); err == nil || !strings.Contains(err.Error(), "--client-ca") {
		t.Fatalf("a missing --client-ca file: error %v should name the flag", err)
	}
}

// 200 idle connections from one IP to the metrics port (the fd-exhaustion row): the other
// clients are served at once, and ext_proc and gRPC health are untouched.
func TestIdleConnectionFloodDoesNotStarveOthers(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, MaxHTTPConns: 32, MaxConnsPerIP: 8})
	var idle []net.Conn
	t.Cleanup(func() {
		for _, c := range idle {
			c.Close()
		}
	})
	for range 200 {
		c, err := net.Dial("tcp", a.MetricsAddr()) // from 127.0.0.1
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	// Another client, from another loopback IP.
	_, port, _ := net.SplitHostPort(a.MetricsAddr())
	client := &http.Client{Timeout: 4 * time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext}}
	start := time.Now()
	resp, err := client.Get("http://127.0.0.1:" + port + "/healthz")
	if err != nil {
		t.Fatalf("/healthz from another client during the flood: %v", err)
	}
	resp.Body.Close()
	// Starved, it would wait for the flood's header timeout (5 s) to free a connection; 3 s
	// tells the two apart with room for a loaded -race host.
	if took := time.Since(start); resp.StatusCode != 200 || took > 3*time.Second {
		t.Fatalf("/healthz answered %d after %v during the flood", resp.StatusCode, took)
	}
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if dest, err := routeOnce(conn); err != nil || dest != "10.0.0.1:8000" {
		t.Fatalf("ext_proc during the flood: %q %v", dest, err)
	}
	hc, err := grpc.NewClient(a.HealthAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // starved, it would hang
	defer cancel()
	if r, err := healthpb.NewHealthClient(hc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health during the flood: %v %v", r, err)
	}
	// The flood's extra connections were closed at accept: reading one sees EOF. A loaded
	// host may not have accepted the last ones yet, so the ones still open are read again
	// (each time for 20 ms: the 8 allowed stay open) until enough are closed or 10 s pass.
	refused, closed := 0, make([]bool, len(idle))
	for deadline := time.Now().Add(10 * time.Second); refused < 200-8 && time.Now().Before(deadline); {
		for i, c := range idle {
			if closed[i] {
				continue
			}
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
				closed[i] = true
				refused++
			}
		}
	}
	if refused < 200-8 {
		t.Fatalf("%d of 200 flood connections were closed, want at least %d (8 allowed per IP)", refused, 200-8)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// The engine-killed row, without Envoy: an endpoint whose /health stops answering leaves
// the candidates on its second failed check (within a second at the default 250 ms
// interval: counted in checks, not timed, as a loaded host runs the checks late) and
// comes back once it answers again.
func TestDeadEngineLeavesAndReturns(t *testing.T) {
	var up [2]atomic.Bool
	var refusals atomic.Int64 // the dead engine's failed /health answers
	var addrs []string
	for i := range 2 {
		up[i].Store(true)
		lis, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:0", i+1))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !up[i].Load() {
				refusals.Add(1)
				http.Error(w, "engine dead", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}), ReadHeaderTimeout: time.Second}
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(func() { srv.Close() })
		addrs = append(addrs, lis.Addr().String())
	}
	// The check that makes an endpoint leave logs it before the next round starts: the
	// failed answers counted then are the checks it took.
	leftAfter := make(chan int64, 1)
	log := slog.New(onRecord(func(r slog.Record) {
		dead := false
		r.Attrs(func(a slog.Attr) bool {
			dead = dead || a.Key == "endpoint" && a.Value.String() == addrs[1]
			return true
		})
		if dead && strings.HasPrefix(r.Message, "endpoint unhealthy") {
			select {
			case leftAfter <- refusals.Load():
			default:
			}
		}
	}))
	cfg := Config{Endpoints: addrs, Policy: "roundrobin", Health: HealthConfig{CheckInterval: 50 * time.Millisecond},
		GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"}
	a, err := Start(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	picks := func(n int) map[string]int {
		got := map[string]int{}
		for range n {
			d, err := a.Picker.Pick(context.Background(), picker.Request{})
			if err != nil {
				t.Fatal(err)
			}
			d.Booking.Release()
			got[d.Endpoints[0]]++
		}
		return got
	}
	if got := picks(10); got[addrs[0]] == 0 || got[addrs[1]] == 0 {
		t.Fatalf("both engines healthy: picks %v", got)
	}
	up[1].Store(false)
	waitUntil(t, 10*time.Second, func() bool { return !a.health.h.Healthy(addrs[1], time.Now()) })
	if n := <-leftAfter; n != 2 {
		t.Fatalf("the dead engine left the candidates after %d failed checks, want 2", n)
	}
	if got := picks(20); got[addrs[1]] != 0 {
		t.Fatalf("picks went to the dead engine: %v", got)
	}
	up[1].Store(true)
	waitUntil(t, 10*time.Second, func() bool { return a.health.h.Healthy(addrs[1], time.Now()) })
	if got := picks(10); got[addrs[1]] == 0 {
		t.Fatalf("the engine came back but gets no picks: %v", got)
	}
	_, body := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/metrics", "", "")
	for _, m := range []string{`loadaware_endpoint_health_transitions_total{source="active",to="unhealthy"} 1`,
		`loadaware_endpoint_health_transitions_total{source="active",to="healthy"} 1`, `loadaware_health_checks_total{outcome="failed"}`} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// onRecord is a slog handler calling f with every record, at every level.
type onRecord func(slog.Record)

func (f onRecord) Enabled(context.Context, slog.Level) bool      { return true }
func (f onRecord) Handle(_ context.Context, r slog.Record) error { f(r); return nil }
func (f onRecord) WithAttrs([]slog.Attr) slog.Handler            { return f }
func (f onRecord) WithGroup(string) slog.Handler                 { return f }

func waitUntil(t *testing.T, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within %v", limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
