package gateway_test

import (
	"bytes"
	"net/http"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestPickerDyingMidStream: a picker replica dies during a request (its stream fails).
// Failing closed (failure_mode_allow false) the request is lost; failing open it is not:
// before routing it goes to a fallback engine with the client's own body, during the
// response the rest of the response reaches the client unprocessed.
func TestPickerDyingMidStream(t *testing.T) {
	dies := func(when func(*extprocv3.ProcessingRequest) bool) func(*fakePicker) {
		return func(fp *fakePicker) {
			fp.hook = func(_ extprocv3.ExternalProcessor_ProcessServer, r *extprocv3.ProcessingRequest) (bool, error) {
				if when(r) {
					return true, status.Error(codes.Unavailable, "picker replica killed")
				}
				return false, nil
			}
		}
	}
	beforeRouting := dies(func(r *extprocv3.ProcessingRequest) bool { return r.GetRequestHeaders() != nil })
	duringResponse := dies(func(r *extprocv3.ProcessingRequest) bool { return len(r.GetResponseBody().GetBody()) > 0 })
	atResponseHeaders := dies(func(r *extprocv3.ProcessingRequest) bool { return r.GetResponseHeaders() != nil })
	tests := []struct {
		name       string
		setup      func(*fakePicker)
		failOpen   bool
		wantStatus int // 0: the client's response is aborted
		wantBody   string
		wantOpen   string
		wantRouted bool // the picker's engine answered (not the fallback)
	}{
		{"before routing, fail closed: 500", beforeRouting, false, 500, "", "", false},
		{"before routing, fail open: the fallback engine answers", beforeRouting, true, 200, "data: a\ndata: b\n", "request", false},
		{"during the response, fail closed: aborted", duringResponse, false, 0, "", "", true},
		{"during the response, fail open: the response completes", duringResponse, true, 200, "data: a\ndata: b\n", "response", true},
		{"at the response headers, fail open: the response completes", atResponseHeaders, true, 200, "data: a\ndata: b\n", "response", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			routed := newUpstream(t, "data: a\n", "data: b\n")
			fallback := newUpstream(t, "data: a\n", "data: b\n")
			fp := newFakePicker(routed.addr())
			tc.setup(fp)
			h := newHarness(t, fp.start(t), gateway.Options{FailOpen: tc.failOpen, Fallback: []string{fallback.addr()}})
			resp, err := http.DefaultClient.Do(post(t, h.url, `{"model":"m","prompt":"p"}`))
			body := ""
			if err == nil {
				b := new(stringsBuilder)
				_, rerr := b.ReadFrom(resp.Body)
				resp.Body.Close()
				body = b.String()
				if rerr != nil {
					err = rerr
				}
			}
			o := h.outcome(t)
			switch {
			case tc.wantStatus == 0:
				if err == nil {
					t.Errorf("the client's response completed (%q), want it aborted", body)
				}
			case err != nil:
				t.Fatalf("request failed: %v", err)
			case resp.StatusCode != tc.wantStatus || (tc.wantBody != "" && body != tc.wantBody):
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, body, tc.wantStatus, tc.wantBody)
			}
			if o.FailedOpen != tc.wantOpen {
				t.Errorf("outcome FailedOpen %q, want %q (%+v)", o.FailedOpen, tc.wantOpen, o)
			}
			if got := routed.hits.Load() == 1; got != tc.wantRouted {
				t.Errorf("the picker's engine answered: %v, want %v", got, tc.wantRouted)
			}
			if tc.wantOpen == "request" {
				if got := string(<-fallback.gotBody); got != `{"model":"m","prompt":"p"}` {
					t.Errorf("the fallback engine got %q, want the client's body", got)
				}
			}
		})
	}
}

type stringsBuilder = bytes.Buffer
