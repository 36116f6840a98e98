package app

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, cfg Config) *App {
	t.Helper()
	cfg.GRPCAddr, cfg.HealthAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	if cfg.Policy == "" {
		cfg.Policy, cfg.Beta = "loadaware", 1
	}
	a, err := Start(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(); err != nil {
			t.Error(err)
		}
	})
	return a
}

func httpDo(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAdminConfig(t *testing.T) {
	tests := []struct {
		name, token, send, body string
		wantCode                int
		wantBody                string
	}{
		{"read is open", "", "", "", 200, `{"policy":"loadaware","beta":1}`},
		{"changes refused without a configured token", "", "", `{"beta":2}`, 403, "--admin-token"},
		{"wrong token", "s3cret", "nope", `{"beta":2}`, 401, "bearer token"},
		{"beta change", "s3cret", "s3cret", `{"beta":2.5}`, 200, `{"policy":"loadaware","beta":2.5}`},
		{"policy change keeps beta", "s3cret", "s3cret", `{"policy":"kvaware"}`, 200, `{"policy":"kvaware","beta":1}`},
		{"invalid beta", "s3cret", "s3cret", `{"beta":-1}`, 400, "out of range"},
		{"unknown policy", "s3cret", "s3cret", `{"policy":"fast"}`, 400, "use one of"},
		{"unknown field", "s3cret", "s3cret", `{"gamma":1}`, 400, "unknown field"},
		{"not JSON", "s3cret", "s3cret", `beta=2`, 400, "must be JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, AdminToken: tt.token})
			url := "http://" + a.MetricsAddr() + "/admin/config"
			method := http.MethodPost
			if tt.body == "" {
				method = http.MethodGet
			}
			code, body := httpDo(t, method, url, tt.send, tt.body)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBody) {
				t.Fatalf("%s = %d %q, want %d containing %q", method, code, body, tt.wantCode, tt.wantBody)
			}
			if code == 200 && method == http.MethodPost {
				if _, got := httpDo(t, http.MethodGet, url, "", ""); !strings.Contains(got, tt.wantBody) {
					t.Fatalf("the change did not stick: GET says %s", got)
				}
			}
		})
	}
}

func TestReadinessFollowsTheEndpointSet(t *testing.T) {
	a := start(t, Config{})
	base := "http://" + a.MetricsAddr()
	if code, body := httpDo(t, "GET", base+"/readyz", "", ""); code != 503 || !strings.Contains(body, "--endpoints") {
		t.Fatalf("readyz before endpoints = %d %q", code, body)
	}
	if code, _ := httpDo(t, "GET", base+"/healthz", "", ""); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
	conn, err := grpc.NewClient(a.HealthAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "inference-extension"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before endpoints: %v %v", r, err)
	}
	a.Fleet.Update([]string{"10.0.0.1:8000"})
	if r, err := w.Recv(); err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after endpoints: %v %v", r, err)
	}
	if code, _ := httpDo(t, "GET", base+"/readyz", "", ""); code != 200 {
		t.Fatalf("readyz after endpoints = %d", code)
	}
}

func TestSecureServingAndMetrics(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}, SecureServing: true})
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := extprocv3.NewExternalProcessorClient(conn).Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		EndOfStream: true, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":path", RawValue: []byte("/v1/models")}}}}}}); err != nil {
		t.Fatal(err)
	}
	r, err := st.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if got := r.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue(); got != "10.0.0.1:8000" {
		t.Fatalf("routed to %q over TLS", got)
	}
	_ = st.CloseSend()
	_, _ = st.Recv()
	_, body := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/metrics", "", "")
	for _, m := range []string{"loadaware_decisions_total", "loadaware_decision_duration_seconds", "loadaware_inflight_requests",
		"loadaware_load_imbalance", "loadaware_beta", "loadaware_policy_info", "go_goroutines"} {
		if !strings.Contains(body, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

func TestBadCertPathSaysWhatItExpects(t *testing.T) {
	_, err := Start(context.Background(), Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		SecureServing: true, CertPath: t.TempDir()}, nil)
	if err == nil || !strings.Contains(err.Error(), "tls.crt and tls.key") {
		t.Fatalf("err = %v", err)
	}
}

func pickerConfig(policy string) picker.Config { return picker.Config{Policy: policy, Beta: 1} }

func TestTakenPortFailsTheStartAndFreesTheOthers(t *testing.T) {
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000"}})
	_, err := Start(context.Background(), Config{GRPCAddr: "127.0.0.1:0", HealthAddr: "127.0.0.1:0", MetricsAddr: a.MetricsAddr()}, nil)
	if err == nil || !strings.Contains(err.Error(), "--metrics-port") {
		t.Fatalf("err = %v, want one naming --metrics-port", err)
	}
}
