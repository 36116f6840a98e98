package simpleengine

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// noSleep records every delay asked for and returns at once.
type noSleep struct {
	mu     sync.Mutex
	delays []time.Duration
}

func (s *noSleep) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.delays = append(s.delays, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *noSleep) taken() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.delays...)
}

func fixedNow() time.Time { return time.Unix(1700000000, 0) }

func postTo(t *testing.T, h http.Handler, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return rec
}

// events splits an SSE body into its data payloads, failing on any other line shape.
func events(t *testing.T, body string) []string {
	t.Helper()
	if !strings.HasSuffix(body, "\n\n") {
		t.Fatalf("SSE body does not end with a blank line: %q", body)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("malformed event %q", ev)
		}
		out = append(out, data)
	}
	return out
}

func TestStreamingFormatsMatchVLLM(t *testing.T) {
	tests := []struct {
		name string
		path string
		body string
		want []string
	}{
		{"completions with usage", "/v1/completions",
			`{"model":"m","prompt":"a b c","max_tokens":2,"stream":true,"stream_options":{"include_usage":true}}`,
			[]string{
				`{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"simple","choices":[{"index":0,"text":" t0","logprobs":null,"finish_reason":null}]}`,
				`{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"simple","choices":[{"index":0,"text":" t1","logprobs":null,"finish_reason":"length"}]}`,
				`{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"simple","choices":[],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}`,
				`[DONE]`,
			}},
		{"chat without usage starts with the assistant role", "/v1/chat/completions",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":true}`,
			[]string{
				`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"simple","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`,
				`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"simple","choices":[{"index":0,"delta":{"content":" t0"},"logprobs":null,"finish_reason":"length"}]}`,
				`[DONE]`,
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{Sleep: (&noSleep{}).sleep, Now: fixedNow})
			rec := postTo(t, e, tc.path, tc.body)
			if rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d content-type %q", rec.Code, rec.Header().Get("Content-Type"))
			}
			if diff := cmp.Diff(tc.want, events(t, rec.Body.String())); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNonStreamingAnswerIsOneJSONObject(t *testing.T) {
	tests := []struct {
		name, path, body, want string
	}{
		{"completion", "/v1/completions", `{"model":"m","prompt":[1,2,3,4],"max_tokens":3}`,
			`{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"simple","choices":[{"index":0,"text":" t0 t1 t2","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":4,"total_tokens":7,"completion_tokens":3}}`},
		{"chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"x y"}]}],"max_completion_tokens":2}`,
			`{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"simple","choices":[{"index":0,"message":{"role":"assistant","content":" t0 t1"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{Sleep: (&noSleep{}).sleep, Now: fixedNow})
			rec := postTo(t, e, tc.path, tc.body)
			if rec.Code != 200 {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			if got := strings.TrimSpace(rec.Body.String()); got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestBadRequestsAre400WithAReason(t *testing.T) {
	tests := []struct {
		name, path, body, wantIn string
	}{
		{"not JSON", "/v1/completions", `{`, "not a JSON"},
		{"no model", "/v1/completions", `{"prompt":"x"}`, `"model"`},
		{"no prompt", "/v1/completions", `{"model":"m"}`, `"prompt"`},
		{"prompt of the wrong type", "/v1/completions", `{"model":"m","prompt":{"a":1}}`, `"prompt" must be`},
		{"no messages", "/v1/chat/completions", `{"model":"m","messages":[]}`, `"messages"`},
		{"content of the wrong type", "/v1/chat/completions", `{"model":"m","messages":[{"role":"u","content":7}]}`, `"content"`},
		{"zero max_tokens", "/v1/completions", `{"model":"m","prompt":"x","max_tokens":0}`, "max_tokens"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := New(Config{Sleep: (&noSleep{}).sleep})
			rec := postTo(t, e, tc.path, tc.body)
			var got struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("error body %q is not JSON: %v", rec.Body, err)
			}
			if rec.Code != http.StatusBadRequest || got.Error.Code != 400 || !strings.Contains(got.Error.Message, tc.wantIn) {
				t.Errorf("got %d %+v, want 400 mentioning %s", rec.Code, got, tc.wantIn)
			}
		})
	}
}

func TestDelaysGrowWithLoadAndShrinkOnPrefixHits(t *testing.T) {
	s := &noSleep{}
	e := New(Config{TTFT: 100 * time.Millisecond, HitTTFT: 10 * time.Millisecond, ITL: 20 * time.Millisecond,
		Slowdown: 0.5, PrefixBytes: 8, Sleep: s.sleep})
	tests := []struct {
		base    time.Duration
		running int64
		want    time.Duration
	}{
		{100 * time.Millisecond, 1, 100 * time.Millisecond},
		{100 * time.Millisecond, 3, 200 * time.Millisecond},
		{20 * time.Millisecond, 2, 30 * time.Millisecond},
		{20 * time.Millisecond, 0, 20 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := e.delay(tc.base, tc.running); got != tc.want {
			t.Errorf("delay(%v, %d) = %v, want %v", tc.base, tc.running, got, tc.want)
		}
	}

	postTo(t, e, "/v1/completions", `{"model":"m","prompt":"same prefix, first suffix","max_tokens":2}`)
	postTo(t, e, "/v1/completions", `{"model":"m","prompt":"same prefix, other suffix","max_tokens":2}`)
	postTo(t, e, "/v1/completions", `{"model":"m","prompt":"different","max_tokens":1}`)
	want := []time.Duration{100 * time.Millisecond, 20 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 100 * time.Millisecond}
	if diff := cmp.Diff(want, s.taken()); diff != "" {
		t.Errorf("delays (-want +got):\n%s", diff)
	}
	if st := e.Stats(); st.Requests != 3 || st.PrefixHits != 1 || st.TokensSent != 5 {
		t.Errorf("stats %+v", st)
	}
}

func TestPrefixMemoryForgetsTheLeastRecent(t *testing.T) {
	e := New(Config{PrefixBytes: 1, PrefixEntries: 2})
	steps := []struct {
		prompt string
		hit    bool
	}{{"a", false}, {"b", false}, {"a", true}, {"c", false}, {"b", false}, {"a", false}}
	for i, st := range steps {
		if got := e.seen(st.prompt); got != st.hit {
			t.Errorf("step %d: seen(%q) = %v, want %v", i, st.prompt, got, st.hit)
		}
	}
}

// gateSleep blocks every sleep until released, announcing each on entered.
type gateSleep struct {
	entered chan struct{}
	release chan struct{}
}

func (g *gateSleep) sleep(ctx context.Context, _ time.Duration) error {
	g.entered <- struct{}{}
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestMetricsReportRunningAndWaiting(t *testing.T) {
	g := &gateSleep{entered: make(chan struct{}, 8), release: make(chan struct{})}
	srv := httptest.NewServer(New(Config{Model: "qwen", MaxRunning: 1, Sleep: g.sleep}))
	defer srv.Close()

	done := make(chan error, 2)
	for range 2 {
		go func() {
			resp, err := http.Post(srv.URL+"/v1/completions", "application/json",
				strings.NewReader(`{"model":"m","prompt":"x","max_tokens":1}`))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			done <- err
		}()
	}
	<-g.entered // one request is generating, so the other one must be waiting (MaxRunning 1)
	waitFor(t, func() bool { return metric(t, srv.URL, "vllm:num_requests_waiting") == "1" })
	if got := metric(t, srv.URL, `vllm:num_requests_running`); got != "1" {
		t.Errorf("running = %s, want 1", got)
	}
	close(g.release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if r, w := metric(t, srv.URL, "vllm:num_requests_running"), metric(t, srv.URL, "vllm:num_requests_waiting"); r != "0" || w != "0" {
		t.Errorf("after the requests: running %s waiting %s, want 0 0", r, w)
	}
}

func TestHealthAndServerLifecycle(t *testing.T) {
	s, err := Start(Config{Sleep: (&noSleep{}).sleep})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("listening on %s, want loopback", s.Addr())
	}
	resp, err := http.Get("http://" + s.Addr() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/health = %d", resp.StatusCode)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestClientLeavingStopsGeneration(t *testing.T) {
	g := &gateSleep{entered: make(chan struct{}, 8), release: make(chan struct{})}
	e := New(Config{Sleep: g.sleep})
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodPost, "/v1/completions",
		strings.NewReader(`{"model":"m","prompt":"x","max_tokens":5,"stream":true}`)).WithContext(ctx)
	finished := make(chan struct{})
	go func() {
		e.ServeHTTP(httptest.NewRecorder(), req)
		close(finished)
	}()
	<-g.entered
	cancel()
	<-finished
	if st := e.Stats(); st.Interrupted != 1 || st.TokensSent != 0 || e.Running() != 0 {
		t.Errorf("stats %+v running %d", st, e.Running())
	}
}

// metric reads one sample's value (labels ignored) from /metrics.
func metric(t *testing.T, base, name string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			if !strings.Contains(line, `model_name="qwen"`) {
				t.Errorf("sample %q lacks the model_name label", line)
			}
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	t.Fatalf("metric %s not exported", name)
	return ""
}

// waitFor polls cond (the waiting count moves on another goroutine with no event to await).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","prompt":"x"}`, `{"model":"m","prompt":[[1,2],[3]]}`, `{"model":"m","prompt":["a","b"],"max_tokens":3}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`, `{"model":1}`, `[]`, `{"model":"m","prompt":null}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		r, err := parseRequest(body, chat, 16)
		if err != nil {
			if err.Error() == "" {
				t.Error("empty error message")
			}
			return
		}
		if r.maxTokens < 1 || r.maxTokens > maxTokensLimit || r.promptTokens < 0 {
			t.Errorf("accepted an out-of-range request: %+v", r)
		}
		if !json.Valid(body) {
			t.Errorf("accepted invalid JSON %q", body)
		}
	})
}
