package gateway_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/bench/gateway"
	"github.com/loadaware/loadaware-epp/extproc"
)

// engine stands in for an engine in these tests (it models none: bench/sim does): it counts
// every request, waits for hold to return, then streams two completion chunks and [DONE].
// kill cuts its connections at once, as a killed process would.
type engine struct {
	srv    *httptest.Server
	served atomic.Int64
}

func startEngine(t testing.TB, hold func(context.Context) error) *engine {
	t.Helper()
	e := &engine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		e.served.Add(1)
		if hold(r.Context()) != nil {
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for range 2 {
			_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"text":" token"}]}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(e.kill)
	return e
}

func (e *engine) addr() string { return e.srv.Listener.Addr().String() }

func (e *engine) kill() {
	e.srv.CloseClientConnections()
	e.srv.Close()
}

// stack is the real picker (app.Start, plaintext, loopback) behind the gateway, in front of
// stand-in engines that hold each request until hold(i) returns.
type stack struct {
	app     *app.App
	gw      *gateway.Gateway
	url     string
	engines []*engine
	byAddr  map[string]int
}

func newStack(t testing.TB, policy string, mode gateway.BodyMode, n int, hold func(i int) func(context.Context) error, opts ...func(*gateway.Options)) *stack {
	t.Helper()
	s := &stack{byAddr: map[string]int{}}
	var addrs []string
	for i := range n {
		e := startEngine(t, hold(i))
		s.engines = append(s.engines, e)
		s.byAddr[e.addr()] = i
		addrs = append(addrs, e.addr())
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := app.Start(context.Background(), app.Config{
		GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0",
		Endpoints: addrs, Policy: policy, Beta: 1, BodyMode: extproc.FullDuplex, Explain: extproc.ExplainAll,
	}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	s.app = a
	gopts := gateway.Options{Mode: mode, Logger: quiet}
	for _, o := range opts {
		o(&gopts)
	}
	gw, err := gateway.Dial(a.GRPCAddr(), gopts)
	if err != nil {
		t.Fatal(err)
	}
	s.gw = gw
	srv := httptest.NewServer(gw)
	s.url = srv.URL
	t.Cleanup(func() {
		srv.Close()
		_ = gw.Close()
		if err := a.Close(); err != nil {
			t.Errorf("close app: %v", err)
		}
	})
	return s
}

// send posts a streamed completion of token ids (so the policy runs: without a tokenizer the
// picker routes text prompts on load alone) and returns the status, the body and the decision
// header.
func (s *stack) send(t *testing.T, id int) (int, string, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","prompt":[101,102,103,%d],"max_tokens":2,"stream":true}`, id)
	req, err := http.NewRequest(http.MethodPost, s.url+"/v1/completions", strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return 0, "", ""
	}
	req.Header.Set("x-loadaware-explain", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, "", ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header.Get("x-loadaware-decision")
}

func (s *stack) inFlight() int {
	n := 0
	for _, l := range s.app.Fleet.All() {
		n += l.InFlight()
	}
	return n
}

func instant(int) func(context.Context) error {
	return func(ctx context.Context) error { return ctx.Err() }
}

func TestEndToEndRoundRobinSpreadsEvenly(t *testing.T) {
	for _, mode := range []gateway.BodyMode{gateway.FullDuplex, gateway.Buffered} {
		t.Run(string(mode), func(t *testing.T) {
			s := newStack(t, "roundrobin", mode, 3, instant)
			for i := range 9 {
				code, body, decision := s.send(t, i)
				if code != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
					t.Fatalf("request %d: %d %q", i, code, body)
				}
				if i == 0 && decision == "" {
					t.Error("no x-loadaware-decision header although x-loadaware-explain was sent")
				}
			}
			s.gw.Wait()
			for i, e := range s.engines {
				if got := e.served.Load(); got != 3 {
					t.Errorf("engine %d served %d of 9 requests, want 3", i, got)
				}
			}
			if n := s.inFlight(); n != 0 {
				t.Errorf("in-flight after all requests = %d, want 0", n)
			}
		})
	}
}

func TestEndToEndLeastLoadPicksTheIdleEndpoint(t *testing.T) {
	entered := make([]chan struct{}, 3)
	release := make(chan struct{})
	for i := range entered {
		entered[i] = make(chan struct{}, 4)
	}
	gate := func(i int) func(context.Context) error {
		return func(ctx context.Context) error {
			select {
			case entered[i] <- struct{}{}:
			default:
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	s := newStack(t, "leastload", gateway.FullDuplex, 3, gate)

	var wg sync.WaitGroup
	busy := map[int]bool{}
	waitEntry := func() int {
		t.Helper()
		select {
		case <-entered[0]:
			return 0
		case <-entered[1]:
			return 1
		case <-entered[2]:
			return 2
		case <-time.After(10 * time.Second):
			t.Fatal("no engine started the request within 10s")
			return -1
		}
	}
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _, _ := s.send(t, i); code != 200 {
				t.Errorf("request %d: status %d", i, code)
			}
		}()
		got := waitEntry()
		if busy[got] {
			t.Errorf("request %d went to engine %d, which already holds a request while another is idle", i, got)
		}
		busy[got] = true
	}
	if n := s.inFlight(); n != 3 {
		t.Errorf("in-flight while 3 requests are held = %d, want 3", n)
	}
	close(release)
	wg.Wait()
	s.gw.Wait()
	if n := s.inFlight(); n != 0 {
		t.Errorf("in-flight after release = %d, want 0", n)
	}
}
