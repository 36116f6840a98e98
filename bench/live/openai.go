package live

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/extproc"
)

const (
	maxBodyBytes     = 16 << 20
	defaultMaxTokens = 16      // vLLM's default max_tokens for completions
	maxTokensLimit   = 1 << 16 // bounds a request's stay in the engine
	outputText       = " token"
	maxModelLen      = 32768 // Qwen2.5-3B-Instruct's context length, reported by /tokenize
)

func (e *Engine) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, false) })
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { e.generate(w, r, true) })
	mux.HandleFunc("POST /tokenize", e.tokenizeHandler)
	mux.HandleFunc("GET /metrics", e.metricsHandler)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
			{"id": e.cfg.ModelName, "object": "model", "owned_by": "vllm", "max_model_len": maxModelLen}}})
	})
	return mux
}

// genRequest is what the engine needs of a completion or chat request.
type genRequest struct {
	chat         bool
	tokens       []uint32
	maxTokens    int
	stream       bool
	includeUsage bool
}

type wireRequest struct {
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []wireMessage   `json:"messages"`
	Stream              bool            `json:"stream"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// parseRequest reads a completion (chat false) or chat body into the prompt's token ids and
// the generation options. Errors are sentences a client can act on.
func (e *Engine) parseRequest(path string, body []byte, chat bool) (genRequest, error) {
	b, err := extproc.ParseBody(path, body)
	if err != nil {
		return genRequest{}, err
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return genRequest{}, fmt.Errorf("the body is not a request object: %v", err)
	}
	g := genRequest{chat: chat, maxTokens: defaultMaxTokens, stream: w.Stream}
	g.includeUsage = w.StreamOptions != nil && w.StreamOptions.IncludeUsage
	if w.MaxCompletionTokens != nil {
		g.maxTokens = *w.MaxCompletionTokens
	}
	if w.MaxTokens != nil {
		g.maxTokens = *w.MaxTokens
	}
	if g.maxTokens < 1 || g.maxTokens > maxTokensLimit {
		return genRequest{}, fmt.Errorf("max_tokens %d: use 1..%d", g.maxTokens, maxTokensLimit)
	}
	switch {
	case chat && e.cfg.Tokenizer != nil:
		if g.tokens, err = e.cfg.Tokenizer.EncodeChat(body); err != nil {
			return genRequest{}, fmt.Errorf("the chat cannot be rendered with this model's template: %v", err)
		}
	case chat:
		g.tokens = byteIDs(renderChat(w.Messages))
	case b.Tokens != nil:
		g.tokens = b.Tokens
	case e.cfg.Tokenizer != nil:
		g.tokens = e.cfg.Tokenizer.Encode(b.Prompt, true)
	default:
		g.tokens = byteIDs(b.Prompt)
	}
	if !chat && batched(w.Prompt) {
		return genRequest{}, errors.New("the prompt is a list of prompts: this engine serves one prompt per request")
	}
	if len(g.tokens) == 0 {
		return genRequest{}, errors.New("the prompt is empty: send at least one token")
	}
	return g, nil
}

// batched reports whether a completion prompt is a list of several prompts (strings or id
// lists) rather than one prompt.
func batched(prompt json.RawMessage) bool {
	var items []json.RawMessage
	if json.Unmarshal(prompt, &items) != nil || len(items) < 2 {
		return false
	}
	first := bytes.TrimSpace(items[0])
	return len(first) > 0 && (first[0] == '"' || first[0] == '[')
}

// renderChat is the stand-in chat template without a tokenizer: "role: content" lines.
func renderChat(msgs []wireMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		var text string
		if json.Unmarshal(m.Content, &text) != nil {
			text = string(m.Content)
		}
		b.WriteString(m.Role + ": " + text + "\n")
	}
	return b.String()
}

// byteIDs is the stand-in tokenizer: one id per UTF-8 byte.
func byteIDs(s string) []uint32 {
	out := make([]uint32, len(s))
	for i := range len(s) {
		out[i] = uint32(s[i])
	}
	return out
}

// generate serves one completion or chat request: it waits the model's ingress latency
// (the API server's work on the measured testbed), queues the request in the model, and
// streams one chunk per output token as the driver produces it.
func (e *Engine) generate(w http.ResponseWriter, r *http.Request, chat bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("reading the body: %v (at most %d bytes)", err, maxBodyBytes))
		return
	}
	g, err := e.parseRequest(r.URL.Path, body, chat)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	if e.ingress > 0 {
		t := time.NewTimer(e.ingress)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	id := fmt.Sprintf("%s%s-%d", prefix, e.cfg.InstanceID, e.nextID.Add(1))
	j := &job{req: sim.Request{ID: id, Tokens: g.tokens, MaxTokens: g.maxTokens}, token: make(chan struct{}, g.maxTokens)}
	if err := e.enqueue(ctx, j); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	if g.stream {
		e.stream(ctx, w, j, g, id)
		return
	}
	n, ok := wait(ctx, j)
	if !ok {
		return
	}
	if j.err != nil {
		writeError(w, statusOf(j.err), j.err.Error())
		return
	}
	text := strings.Repeat(outputText, n)
	object, choice := "text_completion", map[string]any{"index": 0, "logprobs": nil, "finish_reason": "length", "stop_reason": nil}
	if chat {
		object, choice["message"] = "chat.completion", map[string]any{"role": "assistant", "content": text}
	} else {
		choice["text"] = text
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "object": object, "created": time.Now().Unix(), "model": e.cfg.ModelName,
		"choices": []any{choice}, "usage": g.usage(n)})
}

// wait reads every token of j; ok is false when the client went away first.
func wait(ctx context.Context, j *job) (n int, ok bool) {
	for {
		select {
		case _, open := <-j.token:
			if !open {
				return n, true
			}
			n++
		case <-ctx.Done():
			return n, false
		}
	}
}

// statusOf maps a refused request to vLLM's status: a prompt that can never fit is the
// client's error.
func statusOf(err error) int {
	if errors.Is(err, sim.ErrTooLong) {
		return http.StatusBadRequest
	}
	return http.StatusServiceUnavailable
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// usage is the request's usage after n output tokens.
func (g genRequest) usage(n int) usage {
	return usage{PromptTokens: len(g.tokens), CompletionTokens: n, TotalTokens: len(g.tokens) + n}
}

// stream writes the response as server-sent events, as vLLM does: the status line with the
// first token (a request the model refuses gets an error status instead), one chunk per
// token, finish_reason "length" on the last, a usage chunk when asked, then [DONE].
func (e *Engine) stream(ctx context.Context, w http.ResponseWriter, j *job, g genRequest, id string) {
	flusher, _ := w.(http.Flusher)
	created := time.Now().Unix()
	object := "text_completion"
	if g.chat {
		object = "chat.completion.chunk"
	}
	write := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := func(first, last bool) map[string]any {
		var finish any
		if last {
			finish = "length"
		}
		choice := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
		if g.chat {
			delta := map[string]any{"content": outputText}
			if first {
				delta["role"] = "assistant"
			}
			choice["delta"] = delta
		} else {
			choice["text"] = outputText
			choice["stop_reason"] = nil
		}
		return map[string]any{"id": id, "object": object, "created": created, "model": e.cfg.ModelName, "choices": []any{choice}}
	}
	n := 0
	for {
		select {
		case _, open := <-j.token:
			if !open {
				if j.err != nil {
					if n == 0 {
						writeError(w, statusOf(j.err), j.err.Error())
					}
					return // after the first byte an error can only cut the stream
				}
				if g.includeUsage {
					if !write(map[string]any{"id": id, "object": object, "created": created, "model": e.cfg.ModelName, "choices": []any{}, "usage": g.usage(n)}) {
						return
					}
				}
				_, _ = io.WriteString(w, "data: [DONE]\n\n")
				if flusher != nil {
					flusher.Flush()
				}
				return
			}
			if n == 0 {
				w.Header().Set("Content-Type", "text/event-stream")
				w.Header().Set("Cache-Control", "no-cache")
				w.WriteHeader(http.StatusOK)
			}
			n++
			if !write(chunk(n == 1, n == g.maxTokens)) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// tokenizeHandler is vLLM's POST /tokenize: {"prompt": ...} or {"messages": [...]} ->
// {"count", "max_model_len", "tokens"}.
func (e *Engine) tokenizeHandler(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("reading the body: %v", err))
		return
	}
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &probe)
	chat, path := probe.Messages != nil, extproc.PathCompletions
	if chat {
		path = extproc.PathChatCompletions
	}
	g, err := e.parseRequest(path, body, chat)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"count": len(g.tokens), "max_model_len": maxModelLen, "tokens": g.tokens, "token_strs": nil})
}

// metricsHandler writes the vLLM metrics the benchmark and the picker read, in the
// Prometheus text format.
func (e *Engine) metricsHandler(w http.ResponseWriter, _ *http.Request) {
	m := e.Metrics()
	label := fmt.Sprintf("{model_name=%q}", e.cfg.ModelName)
	var b strings.Builder
	metric := func(name, kind, help string, v float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n%s%s %v\n", name, help, name, kind, name, label, v)
	}
	metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", float64(m.Running))
	metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", float64(m.Waiting))
	metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", m.KVUsage)
	metric("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", float64(m.PrefixQueries))
	metric("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", float64(m.PrefixHits))
	metric("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", float64(m.Preemptions))
	inner := fmt.Sprintf("model_name=%q", e.cfg.ModelName)
	e.lat.ttft.write(&b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", inner)
	e.lat.prefill.write(&b, "vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", inner)
	n := e.lat.prefill.count()
	fmt.Fprintf(&b, "# HELP vllm:request_prefill_kv_computed_tokens Histogram of new KV tokens computed during prefill (excluding cached tokens).\n"+
		"# TYPE vllm:request_prefill_kv_computed_tokens histogram\nvllm:request_prefill_kv_computed_tokens_bucket{%s,le=\"+Inf\"} %d\n"+
		"vllm:request_prefill_kv_computed_tokens_sum{%s} %d\nvllm:request_prefill_kv_computed_tokens_count{%s} %d\n",
		inner, n, inner, e.lat.computed.Load(), inner, n)
	e.lat.queue.write(&b, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", inner)
	e.lat.itl.write(&b, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", inner)
	e.lat.e2e.write(&b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", inner)
	// vLLM's info gauges: the labels carry the information. The LoRA gauge names the
	// simulated engine's slots and the adapters of its running and waiting requests (none,
	// max_lora 0, without MaxLoRAs); vLLM sets its value to the time it was set (here one
	// series only: the engine start), the cache gauge's to 1.
	c := e.model.Config()
	fmt.Fprintf(&b, "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"+
		"vllm:lora_requests_info{max_lora=\"%d\",running_lora_adapters=%q,waiting_lora_adapters=%q} %v\n",
		m.MaxLoRAs, strings.Join(m.RunningAdapters, ","), strings.Join(m.WaitingAdapters, ","), float64(e.epoch.UnixNano())/1e9)
	fmt.Fprintf(&b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n"+
		"vllm:cache_config_info{block_size=\"%d\",enable_prefix_caching=\"True\",num_gpu_blocks=\"%d\"} 1\n", c.BlockSize, c.Blocks())
	metric("lmcache:local_cache_usage", "gauge", "Bytes of KV held by LMCache's local CPU backend.", float64(m.CPUTokens)*float64(e.model.Config().KVBytesPerToken()))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = io.WriteString(w, b.String())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers as vLLM's OpenAI server does.
func writeError(w http.ResponseWriter, status int, msg string) {
	kind := "BadRequestError"
	switch {
	case status == http.StatusServiceUnavailable:
		kind = "ServiceUnavailableError"
	case status >= 500:
		kind = "InternalServerError"
	}
	writeJSON(w, status, map[string]any{"object": "error", "message": msg, "type": kind, "param": nil, "code": status})
}
