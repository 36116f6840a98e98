package picker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/loadaware/loadaware-epp/tokenize"
)

func loadQwen(t *testing.T) *tokenize.Tokenizer {
	t.Helper()
	const dir = "../testdata/ext/qwen2_5"
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the Qwen2.5 tokenizer is missing (%v): run make testdata", err)
	}
	tok, err := tokenize.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// fakeEngine answers POST /tokenize with fixed ids, or fails.
func fakeEngine(t *testing.T, fail bool) (addr string, calls *atomic.Int32, last *atomic.Value) {
	t.Helper()
	calls, last = &atomic.Int32{}, &atomic.Value{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		last.Store(string(b))
		if fail || r.URL.Path != "/tokenize" {
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"tokens": []int{7, 8, 9}, "count": 3})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), calls, last
}

func TestTokensLocalAndEngineFallback(t *testing.T) {
	qwen := loadQwen(t)
	const unsupportedChat = `{"model":"qwen","messages":[{"role":"user","content":"hi"}],"chat_template":"{{ messages }}"}`
	tests := []struct {
		name       string
		local      bool
		engine     string // "", "ok", "fail"
		req        Request
		want       []uint32
		wantErr    string
		wantCalls  int32
		wantInBody string
	}{
		{"local completion matches the reference ids", true, "", Request{Prompt: "Hello world"}, []uint32{9707, 1879}, "", 0, ""},
		{"local chat", true, "ok", Request{ChatBody: []byte(`{"model":"qwen","messages":[{"role":"user","content":"Hello world"}]}`)}, nil, "", 0, ""},
		{"unsupported chat goes to the engine", true, "ok", Request{ChatBody: []byte(unsupportedChat)}, []uint32{7, 8, 9}, "", 1, `"chat_template"`},
		{"unsupported chat without an engine is an error naming the reason", true, "", Request{ChatBody: []byte(unsupportedChat)}, nil, "request_chat_template", 0, ""},
		{"engine failure is an error naming the reason", true, "fail", Request{ChatBody: []byte(unsupportedChat)}, nil, "engine_tokenize_failed", 1, ""},
		{"engine-only completion", false, "ok", Request{Model: "qwen", Prompt: "hello"}, []uint32{7, 8, 9}, "", 1, `"prompt":"hello"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok := &Tokens{}
			if tt.local {
				tok.Local = qwen
			}
			endpoints := []string{"127.0.0.1:1"}
			var calls *atomic.Int32
			var last *atomic.Value
			if tt.engine != "" {
				var addr string
				addr, calls, last = fakeEngine(t, tt.engine == "fail")
				tok.Engine = &tokenize.EngineClient{}
				endpoints = []string{addr}
			}
			got, err := tok.Tokenize(context.Background(), tt.req, endpoints)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to name %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tt.want != nil && !slices.Equal(got, tt.want) {
				t.Fatalf("ids %v, want %v", got, tt.want)
			}
			if tt.want == nil && tt.wantErr == "" && len(got) == 0 {
				t.Fatal("no ids")
			}
			if calls != nil && calls.Load() != tt.wantCalls {
				t.Fatalf("engine called %d times, want %d", calls.Load(), tt.wantCalls)
			}
			if tt.wantInBody != "" && !strings.Contains(last.Load().(string), tt.wantInBody) {
				t.Fatalf("engine request %q lacks %s", last.Load(), tt.wantInBody)
			}
		})
	}
}
