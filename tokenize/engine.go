package tokenize

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// EngineClient asks a vLLM engine for token ids (POST /tokenize) when this package cannot
// reproduce a request exactly. Every call is bounded by Timeout.
type EngineClient struct {
	HTTP    *http.Client  // nil: http.DefaultClient
	Timeout time.Duration // per call; 0: 2 s
}

// EngineError is a failed /tokenize call; Reason(err) reports it as ReasonEngine.
type EngineError struct {
	Addr string
	Err  error
}

func (e *EngineError) Error() string { return fmt.Sprintf("engine %s /tokenize: %v", e.Addr, e.Err) }
func (e *EngineError) Unwrap() error { return e.Err }

// chatTokenizeFields are the chat request fields vLLM's /tokenize accepts (TokenizeChatRequest).
var chatTokenizeFields = []string{"model", "messages", "tools", "add_generation_prompt", "continue_final_message",
	"add_special_tokens", "chat_template", "chat_template_kwargs", "mm_processor_kwargs"}

// TokenizeChat returns the engine's prompt ids for a /v1/chat/completions body. addr is the
// engine's "host:port".
func (c *EngineClient) TokenizeChat(ctx context.Context, addr string, chatBody []byte) ([]uint32, error) {
	var in map[string]json.RawMessage
	if err := json.Unmarshal(chatBody, &in); err != nil {
		return nil, &EngineError{Addr: addr, Err: fmt.Errorf("chat body is not a JSON object: %w", err)}
	}
	out := map[string]json.RawMessage{}
	for _, k := range chatTokenizeFields {
		if v, ok := in[k]; ok {
			out[k] = v
		}
	}
	if _, ok := out["add_generation_prompt"]; !ok {
		out["add_generation_prompt"] = json.RawMessage("true")
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, &EngineError{Addr: addr, Err: err}
	}
	return c.post(ctx, addr, body)
}

// TokenizePrompt returns the engine's ids for a completion prompt (with special tokens, as
// /v1/completions encodes it).
func (c *EngineClient) TokenizePrompt(ctx context.Context, addr, model, prompt string) ([]uint32, error) {
	body, err := json.Marshal(map[string]any{"model": model, "prompt": prompt, "add_special_tokens": true})
	if err != nil {
		return nil, &EngineError{Addr: addr, Err: err}
	}
	return c.post(ctx, addr, body)
}

func (c *EngineClient) post(ctx context.Context, addr string, body []byte) ([]uint32, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := addr
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(url, "/")+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return nil, &EngineError{Addr: addr, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &EngineError{Addr: addr, Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, &EngineError{Addr: addr, Err: err}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &EngineError{Addr: addr, Err: fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(raw[:min(len(raw), 200)]))}
	}
	var out struct {
		Tokens []uint32 `json:"tokens"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &EngineError{Addr: addr, Err: fmt.Errorf("answer is not {\"tokens\": [...]}: %w", err)}
	}
	if out.Tokens == nil {
		return nil, &EngineError{Addr: addr, Err: fmt.Errorf("answer has no tokens")}
	}
	return out.Tokens, nil
}
