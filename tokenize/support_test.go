package tokenize

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestResolve(t *testing.T) {
	hub := t.TempDir()
	snap := filepath.Join(hub, "models--Qwen--Qwen2.5-3B-Instruct", "snapshots", "abc")
	os.MkdirAll(snap, 0o755)
	os.WriteFile(filepath.Join(snap, "tokenizer.json"), []byte("{}"), 0o644)
	file := filepath.Join(snap, "tokenizer.json")
	env := func(vals map[string]string) func(string) string { return func(k string) string { return vals[k] } }
	tests := []struct {
		name    string
		opts    ResolveOptions
		want    Source
		wantErr string
	}{
		{"flag file wins", ResolveOptions{Tokenizer: file, Model: "x/y", FromEngine: true}, Source{Path: file}, ""},
		{"flag directory", ResolveOptions{Tokenizer: snap}, Source{Path: snap}, ""},
		{"flag missing fails", ResolveOptions{Tokenizer: filepath.Join(hub, "nope"), FromEngine: true}, Source{}, "--tokenizer"},
		{"model from HF_HUB_CACHE", ResolveOptions{Model: "Qwen/Qwen2.5-3B-Instruct", Getenv: env(map[string]string{"HF_HUB_CACHE": hub})}, Source{Path: snap}, ""},
		{"model from HF_HOME/hub", ResolveOptions{Model: "Qwen/Qwen2.5-3B-Instruct", Getenv: env(map[string]string{"HF_HOME": filepath.Dir(hub)})}, Source{}, "no snapshot"},
		{"model missing falls back to engine", ResolveOptions{Model: "a/b", FromEngine: true, Getenv: env(map[string]string{"HF_HUB_CACHE": hub})}, Source{FromEngine: true}, ""},
		{"model missing without engine fails", ResolveOptions{Model: "a/b", Getenv: env(map[string]string{"HF_HUB_CACHE": hub})}, Source{}, "--tokenizer-from-engine"},
		{"engine only", ResolveOptions{FromEngine: true}, Source{FromEngine: true}, ""},
		{"nothing configured", ResolveOptions{}, Source{}, "no tokenizer configured"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Resolve: %v, want error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Resolve = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// engineStub serves /tokenize on 127.0.0.1 with the given handler.
func engineStub(t *testing.T, h http.HandlerFunc) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func TestEngineClient(t *testing.T) {
	var seen map[string]json.RawMessage
	addr := engineStub(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &seen)
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.Error(w, "wrong route", http.StatusNotFound)
			return
		}
		if _, ok := seen["prompt"]; ok {
			w.Write([]byte(`{"count":2,"tokens":[7,8]}`))
			return
		}
		w.Write([]byte(`{"count":3,"max_model_len":32768,"tokens":[1,2,3]}`))
	})
	c := &EngineClient{Timeout: 10 * time.Second} // a failure bound only: the stub answers at once
	ids, err := c.TokenizeChat(context.Background(), addr, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.2}`))
	if err != nil || !slices.Equal(ids, []uint32{1, 2, 3}) {
		t.Fatalf("TokenizeChat = %v, %v", ids, err)
	}
	if _, ok := seen["temperature"]; ok {
		t.Errorf("sampling fields were forwarded: %v", seen)
	}
	if string(seen["add_generation_prompt"]) != "true" || string(seen["model"]) != `"m"` {
		t.Errorf("request = %v, want model and add_generation_prompt=true", seen)
	}
	ids, err = c.TokenizePrompt(context.Background(), addr, "m", "hello")
	if err != nil || !slices.Equal(ids, []uint32{7, 8}) || string(seen["add_special_tokens"]) != "true" {
		t.Fatalf("TokenizePrompt = %v, %v (request %v)", ids, err, seen)
	}
}

func TestEngineClientFailures(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	slow := engineStub(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	failing := engineStub(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "boom", http.StatusInternalServerError) })
	garbage := engineStub(t, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"nope":1}`)) })
	// Only the stalled engine gets a short timeout: the others answer at once, but a
	// loaded -race host may take over 100 ms to carry the answer.
	tests := []struct {
		name, addr, want string
		timeout          time.Duration
	}{
		{"timeout", slow, "deadline", 100 * time.Millisecond},
		{"server error", failing, "status 500", 10 * time.Second},
		{"no tokens", garbage, "no tokens", 10 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &EngineClient{Timeout: tc.timeout}
			_, err := c.TokenizeChat(context.Background(), tc.addr, []byte(`{"messages":[]}`))
			var ee *EngineError
			if !errors.As(err, &ee) || !strings.Contains(err.Error(), tc.want) || Reason(err) != ReasonEngine {
				t.Fatalf("err = %v, want an EngineError containing %q", err, tc.want)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	tk, err := Load(tinyTokenizer(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg, tk)
	if err != nil {
		t.Fatal(err)
	}
	tk.Encode("hello hello hello", false)
	m.Observe("completion", time.Now())
	m.Fallback(ReasonNoTemplate)
	want := `
# HELP loadaware_tokenize_fallbacks_total Requests not tokenized locally, by reason (engine_tokenize_failed means routed on load alone).
# TYPE loadaware_tokenize_fallbacks_total counter
loadaware_tokenize_fallbacks_total{reason="no_chat_template"} 1
# HELP loadaware_tokenize_piece_cache_hits_total Lookups of pre-tokenized pieces answered from the cache (hit rate = hits / lookups).
# TYPE loadaware_tokenize_piece_cache_hits_total counter
loadaware_tokenize_piece_cache_hits_total 1
# HELP loadaware_tokenize_piece_cache_lookups_total Lookups of pre-tokenized pieces in the tokenizer's cache.
# TYPE loadaware_tokenize_piece_cache_lookups_total counter
loadaware_tokenize_piece_cache_lookups_total 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "loadaware_tokenize_fallbacks_total",
		"loadaware_tokenize_piece_cache_hits_total", "loadaware_tokenize_piece_cache_lookups_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "loadaware_tokenize_duration_seconds"); n != 1 {
		t.Fatalf("duration series = %d, want 1", n)
	}
	if _, err := NewMetrics(reg, tk); err == nil {
		t.Fatal("registering twice succeeded")
	}
}

func TestRunCommand(t *testing.T) {
	dir := requireTestdata(t, "qwen2_5")
	tests := []struct {
		name, args, in, out string
		code                int
	}{
		{"strings", "", "\"Hello world\"\n\"<|im_start|>hello<|im_end|>\"\n", "[9707,1879]\n[151644,14990,151645]\n", 0},
		{"chat", "--chat", `{"messages":[{"role":"user","content":"hi"}]}` + "\n", "", 0},
		{"string under --chat", "--chat", "\"hi\"\n", "null\n", 1},
		{"object without --chat", "", `{"messages":[]}` + "\n", "null\n", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"--tokenizer", dir}, strings.Fields(tc.args)...)
			code := RunCommand(args, strings.NewReader(tc.in), &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stderr %s)", code, tc.code, errb.String())
			}
			if tc.out != "" && out.String() != tc.out {
				t.Fatalf("stdout %q, want %q", out.String(), tc.out)
			}
			if tc.name == "chat" {
				var ids []uint32
				if err := json.Unmarshal(out.Bytes(), &ids); err != nil || len(ids) == 0 || ids[0] != 151644 {
					t.Fatalf("chat output %q: want ids starting with <|im_start|>", out.String())
				}
			}
		})
	}
	var errb bytes.Buffer
	if code := RunCommand(nil, strings.NewReader(""), io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), "usage") {
		t.Fatalf("no flags: exit %d, stderr %q", code, errb.String())
	}
}

func TestChatRefusals(t *testing.T) {
	tk := loadRef(t, "qwen2_5")
	tests := []struct {
		name, body, reason string
	}{
		{"not JSON", `{`, ReasonBadRequest},
		{"no messages", `{"model":"m"}`, ReasonBadRequest},
		{"image part", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, ReasonContentPart},
		{"own template", `{"messages":[{"role":"user","content":"x"}],"chat_template":"{{ 1 }}"}`, ReasonRequestTemplate},
		{"continue final", `{"messages":[{"role":"user","content":"x"}],"continue_final_message":true}`, ReasonRequestOption},
		{"tool extra field", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","strict":true}}]}`, ReasonToolSchema},
		{"float 1.0", `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"d":1.0}}}]}`, ReasonJSONValue},
		{"U+2028", `{"messages":[{"role":"user","content":"a\u2028b"}]}`, ReasonJSONValue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tk.EncodeChat([]byte(tc.body))
			if !errors.Is(err, ErrUnsupported) || Reason(err) != tc.reason {
				t.Fatalf("EncodeChat: %v (reason %q), want reason %q", err, Reason(err), tc.reason)
			}
		})
	}
	gptoss := loadRef(t, "gptoss")
	if _, err := gptoss.EncodeChat([]byte(`{"messages":[{"role":"user","content":"x"}]}`)); Reason(err) != ReasonNoTemplate {
		t.Fatalf("gpt-oss without template: %v", err)
	}
}

func TestPyFloatRepr(t *testing.T) {
	tests := []struct {
		f    float64
		want string
	}{{0.5, "0.5"}, {1, "1.0"}, {-2.25, "-2.25"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {0.0001, "0.0001"}, {1e-05, "1e-05"}, {123.456, "123.456"}, {1.5e300, "1.5e+300"}}
	for _, tc := range tests {
		if got := pyFloatRepr(tc.f); got != tc.want {
			t.Errorf("pyFloatRepr(%v) = %q, want %q", tc.f, got, tc.want)
		}
	}
}
