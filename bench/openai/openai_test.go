package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// clock returns a now that advances one millisecond per call, from t0.
func clock() (func() time.Time, time.Time) {
	t0 := time.Unix(1700000000, 0)
	n := 0
	return func() time.Time { n++; return t0.Add(time.Duration(n) * time.Millisecond) }, t0
}

func TestReadStream(t *testing.T) {
	const (
		text  = `data: {"choices":[{"index":0,"text":" token"}]}` + "\n\n"
		delta = `data: {"choices":[{"index":0,"delta":{"content":" token"}}]}` + "\n\n"
		role  = `data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n"
		usage = `data: {"choices":[],"usage":{"completion_tokens":2}}` + "\n\n"
		done  = "data: [DONE]\n\n"
	)
	tests := []struct {
		name       string
		stream     string
		wantTokens int
		wantUsage  int
		wantDone   bool
		wantErr    string
	}{
		{"completion chunks, usage, done", text + text + usage + done, 2, 2, true, ""},
		{"chat: a role-only chunk carries no token", role + delta + delta + done, 2, -1, true, ""},
		{"CRLF lines, no space after data:, comments and other fields", ": ping\r\nevent: message\r\nid: 1\r\ndata:{\"choices\":[{\"text\":\"a\"}]}\r\n\r\ndata:[DONE]\r\n\r\n", 1, -1, true, ""},
		{"data split over two lines", "data: {\"choices\":\ndata: [{\"text\":\"a\"}]}\n\n" + done, 1, -1, true, ""},
		{"an unterminated last event still counts", text + "data: [DONE]", 1, -1, true, ""},
		{"no done", text + text, 2, -1, false, ""},
		{"empty stream", "", 0, -1, false, ""},
		{"data not JSON", text + "data: {oops\n\n", 1, -1, false, "the event ending on line 4: an event's data is not a JSON chunk"},
		{"error object mid-stream", text + `data: {"error":{"message":"engine died","code":500}}` + "\n\n", 1, -1, false, "the server reported an error in the stream: engine died"},
		{"event after done", done + text, 0, -1, true, "an event follows data: [DONE]"},
		{"line longer than 1 MiB", "data: " + strings.Repeat("x", maxLine+1) + "\n\n", 0, -1, false, "longer than 1 MiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now, t0 := clock()
			s, err := ReadStream(strings.NewReader(tc.stream), now)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if len(s.Tokens) != tc.wantTokens || s.CompletionTokens != tc.wantUsage || s.Done != tc.wantDone {
				t.Errorf("got %d tokens, usage %d, done %v; want %d, %d, %v", len(s.Tokens), s.CompletionTokens, s.Done, tc.wantTokens, tc.wantUsage, tc.wantDone)
			}
			for i, at := range s.Tokens {
				if i > 0 && !at.After(s.Tokens[i-1]) || !at.After(t0) {
					t.Errorf("token stamps %v are not taken in arrival order", s.Tokens)
				}
			}
		})
	}
}

// FuzzReadStream checks that no stream makes ReadStream panic and that the stream's
// delivery does not matter: read one byte at a time, it says the same.
func FuzzReadStream(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"completion_tokens\":1}}\r\n\r\n",
		": c\nevent: e\ndata: [DONE]", "data: {\"error\":{\"message\":\"x\"}}\n\n", "data:\n\n", "\r\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stream string) {
		now, _ := clock()
		a, errA := ReadStream(strings.NewReader(stream), now)
		now, _ = clock()
		b, errB := ReadStream(iotest.OneByteReader(strings.NewReader(stream)), now)
		if (errA == nil) != (errB == nil) || len(a.Tokens) != len(b.Tokens) || a.Done != b.Done || a.CompletionTokens != b.CompletionTokens {
			t.Fatalf("whole: %d tokens, done %v, usage %d, %v; byte by byte: %d, %v, %d, %v",
				len(a.Tokens), a.Done, a.CompletionTokens, errA, len(b.Tokens), b.Done, b.CompletionTokens, errB)
		}
		if len(a.Tokens) > strings.Count(stream, "data:") {
			t.Fatalf("%d tokens from %d data fields", len(a.Tokens), strings.Count(stream, "data:"))
		}
	})
}

func TestRequestBody(t *testing.T) {
	tests := []struct {
		name     string
		req      Request
		wantPath string
		want     map[string]any
	}{
		{"streamed completion of token ids", Request{Model: "m", Prompt: []uint32{1, 2}, MaxTokens: 4, Stream: true}, "/v1/completions",
			map[string]any{"model": "m", "prompt": []any{1.0, 2.0}, "max_tokens": 4.0, "temperature": 0.0, "stream": true, "stream_options": map[string]any{"include_usage": true}}},
		{"whole completion of text, server's max_tokens", Request{Model: "m", Prompt: "hi"}, "/v1/completions",
			map[string]any{"model": "m", "prompt": "hi", "temperature": 0.0}},
		{"chat", Request{Model: "m", Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 1}, "/v1/chat/completions",
			map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}, "max_tokens": 1.0, "temperature": 0.0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.req.Body()
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || tc.req.Path() != tc.wantPath {
				t.Errorf("path %s, body (-want +got):\n%s", tc.req.Path(), diff)
			}
		})
	}
	if _, err := (Request{Prompt: func() {}}).Body(); err == nil {
		t.Error("a prompt JSON cannot encode gave no error")
	}
}

// server answers every request with handler, after checking it is a JSON POST.
func server(t *testing.T, handler func(w http.ResponseWriter, r *http.Request)) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusMethodNotAllowed)
			return
		}
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return &Client{HTTP: srv.Client(), BaseURL: srv.URL}
}

func streamTokens(n int) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Echo", r.Header.Get("X-Request-Id"))
		for range n {
			_, _ = io.WriteString(w, `data: {"choices":[{"text":" t"}]}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, `data: {"choices":[],"usage":{"completion_tokens":`+string(rune('0'+n))+`}}`+"\n\ndata: [DONE]\n\n")
	}
}

func TestDoStreams(t *testing.T) {
	c := server(t, streamTokens(3))
	resp, err := c.Do(context.Background(), Request{Model: "m", Prompt: "hi", MaxTokens: 3, Stream: true, Header: http.Header{"X-Request-Id": {"r1"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 200 || len(resp.Tokens) != 3 || resp.CompletionTokens != 3 || !resp.Done || resp.Header.Get("X-Echo") != "r1" {
		t.Fatalf("response %+v", resp)
	}
	if resp.TTFT() <= 0 || len(resp.ITLs()) != 2 || resp.E2E() < resp.TTFT() || resp.End.Before(resp.Tokens[2]) {
		t.Errorf("TTFT %v, ITLs %v, E2E %v: want positive, two gaps, E2E at least TTFT", resp.TTFT(), resp.ITLs(), resp.E2E())
	}
}

func TestDoReadsAWholeAnswer(t *testing.T) {
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"text":"ab"}],"usage":{"completion_tokens":2}}`)
	})
	resp, err := c.Do(context.Background(), Request{Model: "m", Prompt: []int{1}})
	if err != nil || resp.CompletionTokens != 2 || len(resp.Tokens) != 0 || resp.E2E() <= 0 {
		t.Fatalf("Do = %+v, %v; want usage 2, no token stamps", resp, err)
	}
}

func TestDoFailsClearly(t *testing.T) {
	block := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"text":" t"}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	tests := []struct {
		name       string
		handler    func(w http.ResponseWriter, r *http.Request)
		stream     bool
		timeout    time.Duration
		wantStatus int
		wantTokens int
		want       string
	}{
		{"an OpenAI error object", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"object":"error","message":"the engine shut down","type":"ServiceUnavailableError","code":503}`)
		}, true, 0, 503, 0, "status 503: the engine shut down"},
		{"a nested error object", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"message":"slow down"}}`)
		}, true, 0, 429, 0, "status 429: slow down"},
		{"a plain-text error", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no route", http.StatusNotFound)
		}, false, 0, 404, 0, "status 404: no route"},
		{"a malformed stream", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `data: {"choices":[{"text":" t"}]}`+"\n\ndata: nope\n\n")
		}, true, 0, 200, 1, "read the stream: the event ending on line 4: an event's data is not a JSON chunk"},
		{"a stream without done", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `data: {"choices":[{"text":" t"}]}`+"\n\n")
		}, true, 0, 200, 1, "the stream ended without data: [DONE]"},
		{"a whole answer that is not JSON", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "<html>")
		}, false, 0, 200, 0, `the answer is not a completion object: "<html>"`},
		{"the client's timeout mid-stream", block, true, 50 * time.Millisecond, 200, 1, "no complete answer within 50ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := server(t, tc.handler)
			c.Timeout = tc.timeout
			resp, err := c.Do(context.Background(), Request{Model: "m", Prompt: "hi", Stream: tc.stream})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if resp.Status != tc.wantStatus || len(resp.Tokens) != tc.wantTokens {
				t.Errorf("status %d, %d tokens; want %d, %d", resp.Status, len(resp.Tokens), tc.wantStatus, tc.wantTokens)
			}
			var se *StatusError
			if errors.As(err, &se) != (tc.wantStatus != 200) {
				t.Errorf("error %v: *StatusError %v, want it for a status other than 200", err, se)
			}
		})
	}
}

func TestDoStopsWhenTheCallerCancels(t *testing.T) {
	first := make(chan struct{})
	c := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"text":" t"}]}`+"\n\n")
		w.(http.Flusher).Flush()
		close(first)
		<-r.Context().Done()
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-first
		cancel()
	}()
	if _, err := c.Do(ctx, Request{Model: "m", Prompt: "hi", Stream: true}); !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "within") {
		t.Fatalf("error %v, want the caller's cancellation", err)
	}
	if _, err := c.Do(ctx, Request{Model: "m", Prompt: "hi"}); !errors.Is(err, context.Canceled) {
		t.Errorf("a request on a cancelled context: %v", err)
	}
}

func TestPaddedCompletionHasTheAskedSize(t *testing.T) {
	for _, ids := range []bool{false, true} {
		for _, n := range []int{64, 1000, 8192} {
			b := PaddedCompletion(n, ids)
			var v struct {
				Prompt json.RawMessage `json:"prompt"`
			}
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("body is not JSON: %v", err)
			}
			if len(b) < n || len(b) > n+16 {
				t.Errorf("PaddedCompletion(%d, ids=%v) has %d bytes", n, ids, len(b))
			}
			if isIDs := v.Prompt[0] == '['; isIDs != ids {
				t.Errorf("PaddedCompletion(%d, ids=%v) prompt starts %q", n, ids, v.Prompt[:1])
			}
		}
	}
}
