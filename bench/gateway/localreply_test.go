package gateway_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/internal/testnet"
)

// resetter is an engine that reads a request and closes the connection without answering:
// a reset before the response headers, as a killed engine or a pooled connection it closed
// gives.
func resetter(t *testing.T) (addr string, hits *atomic.Int32) {
	t.Helper()
	hits = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		_ = c.Close()
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), hits
}

// pickerStatus is the :status of the response headers the picker received on a stream
// ("" when it received none).
func pickerStatus(msgs []*extprocv3.ProcessingRequest) string {
	for _, m := range msgs {
		for _, h := range m.GetResponseHeaders().GetHeaders().GetHeaders() {
			if h.GetKey() == ":status" {
				return string(h.GetRawValue()) + h.GetValue()
			}
		}
	}
	return ""
}

// An endpoint that fails before its response headers is followed by the next of the
// picker's list, and when none is left the client gets Envoy's local reply, a 503 that went
// through the picker's response phase (the picker saw :status 503 and its header mutation
// reached the client), in both body modes (decision 1535).
func TestUpstreamFailureBeforeHeadersFollowsEnvoy(t *testing.T) {
	const refused, reset, served = "refused", "reset", "served"
	tests := []struct {
		name      string
		list      []string
		status    int
		body      string // the client's whole body
		attempts  int
		endpoint  int // index into list of the endpoint that answered; -1: none
		resetHits int32
	}{
		{"a refused connect moves to the next endpoint", []string{refused, served}, 200, "ok", 2, 1, 0},
		{"a reset before the headers moves to the next endpoint", []string{reset, served}, 200, "ok", 2, 1, 1},
		{"the first endpoint answering ends the list", []string{served, refused}, 200, "ok", 1, 0, 0},
		{"every endpoint refusing is Envoy's connect-failure local reply",
			[]string{refused, refused}, 503, "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure", 2, -1, 0},
		{"a reset last is Envoy's connection-termination local reply",
			[]string{refused, reset}, 503, "upstream connect error or disconnect/reset before headers. reset reason: connection termination", 2, -1, 1},
		{"a single reset endpoint is a local reply after one attempt",
			[]string{reset}, 503, "upstream connect error or disconnect/reset before headers. reset reason: connection termination", 1, -1, 1},
	}
	for _, mode := range []gateway.BodyMode{gateway.FullDuplex, gateway.Buffered} {
		for _, tc := range tests {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				up := newUpstream(t, "ok")
				resetAddr, resetHits := resetter(t)
				var addrs []string
				for _, kind := range tc.list {
					switch kind {
					case refused:
						addrs = append(addrs, testnet.RefusedAddr(t))
					case reset:
						addrs = append(addrs, resetAddr)
					case served:
						addrs = append(addrs, up.addr())
					}
				}
				fp := newFakePicker(strings.Join(addrs, ","))
				h := newHarness(t, fp.start(t), gateway.Options{Mode: mode})
				resp, got := do(t, post(t, h.url, `{"model":"m","prompt":"p"}`))
				o := h.outcome(t)
				h.gw.Wait()

				if resp.StatusCode != tc.status || got != tc.body {
					t.Errorf("client got %d %q, want %d %q", resp.StatusCode, got, tc.status, tc.body)
				}
				if ps := pickerStatus(fp.recorded(0)); ps != strconv.Itoa(tc.status) {
					t.Errorf("the picker's response phase saw :status %q, want %d", ps, tc.status)
				}
				if p := resp.Header.Get("x-picked"); p != fp.dest {
					t.Errorf("x-picked %q, want the picker's response-phase mutation %q", p, fp.dest)
				}
				wantEndpoint := ""
				if tc.endpoint >= 0 {
					wantEndpoint = addrs[tc.endpoint]
				}
				if o.Status != tc.status || o.Attempts != tc.attempts || o.Endpoint != wantEndpoint {
					t.Errorf("outcome status %d attempts %d endpoint %q, want %d, %d, %q", o.Status, o.Attempts, o.Endpoint, tc.status, tc.attempts, wantEndpoint)
				}
				if failed := tc.endpoint < 0; failed != strings.Contains(o.Err, "no endpoint of") {
					t.Errorf("outcome error %q, want one naming the failed list: %v", o.Err, failed)
				}
				if n := resetHits.Load(); n != tc.resetHits {
					t.Errorf("the resetting engine got %d requests, want %d", n, tc.resetHits)
				}
			})
		}
	}
}
