// Package openai is the benchmark's one OpenAI-compatible client. It builds completion and
// chat requests, sends them, and reads the answer, streamed as server-sent events (SSE) or
// whole, stamping the arrival of every chunk that carries text, so a caller gets time to first
// token, inter-token latencies and end-to-end latency from one place.
//
// It knows nothing of engines, pickers or runs: a load driver owns the schedule and turns the
// stamps into its own rows. Every failure is an error that says what went wrong: a transport
// error, a status other than 200 (*StatusError, with the server's message), a stream that is
// not SSE of JSON chunks, an error event in the stream, a stream that ends without
// "data: [DONE]", or an answer that took longer than Client.Timeout.
package openai

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

// Request is one completion (Prompt) or chat (Messages) request.
type Request struct {
	Model string
	// Prompt is a completion's prompt: text (a string) or token ids ([]uint32, []int).
	Prompt any
	// Messages make the request a chat completion (/v1/chat/completions); Prompt is then unused.
	Messages []Message
	// MaxTokens is max_tokens; 0 leaves it to the server.
	MaxTokens int
	// Stream asks for server-sent events, with a usage chunk before [DONE].
	Stream bool
	// Header holds extra request headers (X-Request-Id, ...); nil: none.
	Header http.Header
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Path is the request's OpenAI path: /v1/chat/completions with Messages, else /v1/completions.
func (r Request) Path() string {
	if r.Messages != nil {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// Body is the request's JSON body. Sampling is greedy (temperature 0), so equal requests ask
// for equal work.
func (r Request) Body() ([]byte, error) {
	body := map[string]any{"model": r.Model, "temperature": 0}
	if r.Messages != nil {
		body["messages"] = r.Messages
	} else {
		body["prompt"] = r.Prompt
	}
	if r.MaxTokens > 0 {
		body["max_tokens"] = r.MaxTokens
	}
	if r.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("openai: encode the request: %w", err)
	}
	return b, nil
}

// Client sends requests to one OpenAI-compatible server. Its methods are safe for concurrent
// use.
type Client struct {
	// HTTP sends the requests; nil: http.DefaultClient.
	HTTP *http.Client
	// BaseURL is the server's scheme and address, "http://host:port".
	BaseURL string
	// Timeout bounds one request from its sending to the end of its answer; 0: only the
	// caller's context bounds it.
	Timeout time.Duration
}

// Response is what the client saw of one answer.
type Response struct {
	// Status is the HTTP status (0 when no answer arrived); Header the answer's headers.
	Status int
	Header http.Header
	// Sent is when the request was handed to the transport (when Do began, if it never
	// was); End when the answer's last byte was read (or the read failed).
	Sent, End time.Time
	Stream
}

// Stream is what a server-sent event stream carried.
type Stream struct {
	// Tokens are the arrival times of the chunks that carried text (one per token for
	// servers that stream token by token, as vLLM does). Empty for an answer not streamed.
	Tokens []time.Time
	// CompletionTokens is the usage the server reported; -1 when it reported none.
	CompletionTokens int
	// Done reports whether "data: [DONE]" arrived.
	Done bool
}

// TTFT is the time from sending to the first token; 0 when no token arrived.
func (r Response) TTFT() time.Duration {
	if len(r.Tokens) == 0 {
		return 0
	}
	return r.Tokens[0].Sub(r.Sent)
}

// ITLs are the gaps between consecutive tokens.
func (r Response) ITLs() []time.Duration {
	if len(r.Tokens) < 2 {
		return nil
	}
	out := make([]time.Duration, len(r.Tokens)-1)
	for i := 1; i < len(r.Tokens); i++ {
		out[i-1] = r.Tokens[i].Sub(r.Tokens[i-1])
	}
	return out
}

// E2E is the time from sending to the end of the answer.
func (r Response) E2E() time.Duration { return r.End.Sub(r.Sent) }

// StatusError is an answer whose status is not 200.
type StatusError struct {
	Code int
	// Message is the server's error message (an OpenAI error object's message, else the
	// start of the body).
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("openai: status %d", e.Code)
	}
	return fmt.Sprintf("openai: status %d: %s", e.Code, e.Message)
}

// maxErrorBody bounds the part of an error answer read for its message; maxAnswerBytes a
// whole (not streamed) answer.
const (
	maxErrorBody   = 4 << 10
	maxAnswerBytes = 64 << 20
)

// Do sends r and reads its answer. The Response holds what arrived even when Do fails (the
// tokens before a stream broke, the status of a refused request).
func (c *Client) Do(ctx context.Context, r Request) (Response, error) {
	body, err := r.Body()
	if err != nil {
		return Response{Sent: time.Now(), Stream: Stream{CompletionTokens: -1}}, err
	}
	return c.Post(ctx, r.Path(), body, r.Stream, r.Header)
}

// Post is Do for a body already encoded (built once and sent many times, or recorded): it
// posts body to path with the extra headers h and reads the answer as a stream when stream
// is set, else whole.
func (c *Client) Post(ctx context.Context, path string, body []byte, stream bool, h http.Header) (Response, error) {
	resp := Response{Sent: time.Now(), Stream: Stream{CompletionTokens: -1}}
	parent := ctx
	if c.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.Timeout)
		defer cancel()
	}
	url := c.BaseURL + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return resp, fmt.Errorf("openai: %w", err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	// wrap names the request and says when the client's own timeout ended it.
	wrap := func(what string, err error) error {
		if parent.Err() == nil && ctx.Err() != nil {
			return fmt.Errorf("openai: POST %s: no complete answer within %v: %w", url, c.Timeout, ctx.Err())
		}
		return fmt.Errorf("openai: POST %s: %s: %w", url, what, err)
	}
	resp.Sent = time.Now()
	hr, err := hc.Do(req)
	if err != nil {
		resp.End = time.Now()
		return resp, wrap("send", err)
	}
	defer hr.Body.Close()
	resp.Status, resp.Header = hr.StatusCode, hr.Header
	if hr.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(hr.Body, maxErrorBody))
		resp.End = time.Now()
		return resp, &StatusError{Code: hr.StatusCode, Message: errorMessage(b)}
	}
	if stream {
		resp.Stream, err = ReadStream(hr.Body, time.Now)
		resp.End = time.Now()
		if err != nil {
			return resp, wrap("read the stream", err)
		}
		if !resp.Done {
			return resp, fmt.Errorf("openai: POST %s: the stream ended without data: [DONE]", url)
		}
		return resp, nil
	}
	b, err := io.ReadAll(io.LimitReader(hr.Body, maxAnswerBytes))
	resp.End = time.Now()
	if err != nil {
		return resp, wrap("read the answer", err)
	}
	var a struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *usage            `json:"usage"`
	}
	if err := json.Unmarshal(b, &a); err != nil || a.Choices == nil {
		return resp, fmt.Errorf("openai: POST %s: the answer is not a completion object: %q", url, truncate(b))
	}
	if a.Usage != nil {
		resp.CompletionTokens = a.Usage.CompletionTokens
	}
	return resp, nil
}

type usage struct {
	CompletionTokens int `json:"completion_tokens"`
}

// errorMessage is the message of an OpenAI error body ({"message": ...} or
// {"error": {"message": ...}}), else the body's start.
func errorMessage(b []byte) string {
	var e struct {
		Message string `json:"message"`
		Error   *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		if e.Error != nil && e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	return truncate(bytes.TrimSpace(b))
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// PaddedCompletion returns the body of a whole (not streamed) one-token completion of at
// least n bytes (and at most 16 more): its prompt text, or a list of token ids when ids. It is
// the load generators' request, whose size is what they vary.
func PaddedCompletion(n int, ids bool) []byte {
	body := func(prompt any) []byte {
		b, _ := Request{Model: "load", MaxTokens: 1, Prompt: prompt}.Body()
		return b
	}
	if !ids {
		return body(strings.Repeat("lorem ipsum ", max(n-len(body("")), 0)/12+1))
	}
	toks := make([]int, (max(n-len(body([]int{})), 0)+5)/6) // each id is 5 digits and a comma
	for i := range toks {
		toks[i] = 10000 + i%90000
	}
	return body(toks)
}
