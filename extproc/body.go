package extproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// Paths whose bodies the picker reads.
const (
	PathCompletions     = "/v1/completions"
	PathChatCompletions = "/v1/chat/completions"
)

// Body is what routing needs of an OpenAI request body.
type Body struct {
	Model  string
	Prompt string   // completions: the (first) prompt as text
	Tokens []uint32 // completions: the (first) prompt as token ids
	Chat   bool     // a chat completion: the picker gets the raw body
}

// BadRequestError is a client error in the body; its message names the problem.
type BadRequestError struct{ Msg string }

func (e *BadRequestError) Error() string { return e.Msg }

func badRequest(format string, args ...any) error {
	return &BadRequestError{Msg: fmt.Sprintf(format, args...)}
}

// ParseBody reads an OpenAI request body for path (the path without its query). Every
// body must be a JSON object with a "model". /v1/completions needs "prompt": a string, a
// list of strings, a list of token ids or a list of lists of token ids (routing uses the
// first prompt). /v1/chat/completions needs a non-empty "messages" list. Errors are
// *BadRequestError with a sentence a client can act on.
func ParseBody(path string, body []byte) (Body, error) {
	var req struct {
		Model    json.RawMessage `json:"model"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages json.RawMessage `json:"messages"`
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return Body{}, badRequest("the request body is empty: send a JSON object with \"model\"")
	}
	if err := json.Unmarshal(body, &req); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "" {
			return Body{}, badRequest("the request body is JSON but not an object: send {\"model\": ..., ...}")
		}
		return Body{}, badRequest("the request body is not valid JSON: %v", err)
	}
	var b Body
	if isNull(req.Model) {
		return Body{}, badRequest("the request body has no \"model\": name the model to use")
	}
	if err := json.Unmarshal(req.Model, &b.Model); err != nil || b.Model == "" {
		return Body{}, badRequest("\"model\" must be a non-empty string")
	}
	switch path {
	case PathCompletions:
		if isNull(req.Prompt) {
			return Body{}, badRequest("a completions request needs \"prompt\": a string, a list of strings, or token ids")
		}
		if err := parsePrompt(req.Prompt, &b); err != nil {
			return Body{}, err
		}
	case PathChatCompletions:
		if isNull(req.Messages) {
			return Body{}, badRequest("a chat completions request needs \"messages\": a list of {\"role\", \"content\"} objects")
		}
		var msgs []json.RawMessage
		if err := json.Unmarshal(req.Messages, &msgs); err != nil {
			return Body{}, badRequest("\"messages\" must be a list of {\"role\", \"content\"} objects")
		}
		if len(msgs) == 0 {
			return Body{}, badRequest("\"messages\" is empty: send at least one message")
		}
		b.Chat = true
	}
	return b, nil
}

func isNull(m json.RawMessage) bool {
	return len(m) == 0 || string(bytes.TrimSpace(m)) == "null"
}

// parsePrompt fills b from a prompt in any of its four OpenAI shapes.
func parsePrompt(raw json.RawMessage, b *Body) error {
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		return json.Unmarshal(raw, &b.Prompt)
	case '[':
	default:
		return badRequest("\"prompt\" must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return badRequest("\"prompt\" is not a valid list: %v", err)
	}
	if len(items) == 0 {
		return badRequest("\"prompt\" is an empty list: send the prompt text or its token ids")
	}
	first := bytes.TrimSpace(items[0])
	switch {
	case len(first) > 0 && first[0] == '"':
		return json.Unmarshal(first, &b.Prompt)
	case len(first) > 0 && first[0] == '[':
		var ids []json.RawMessage
		if err := json.Unmarshal(first, &ids); err != nil || len(ids) == 0 {
			return badRequest("\"prompt\"[0] must be a non-empty list of token ids")
		}
		return parseIDs(ids, b)
	}
	return parseIDs(items, b)
}

// parseIDs converts JSON numbers into token ids, refusing anything that is not a
// non-negative integer below 2^32.
func parseIDs(items []json.RawMessage, b *Body) error {
	b.Tokens = make([]uint32, len(items))
	for i, it := range items {
		var f float64
		if err := json.Unmarshal(it, &f); err != nil || f < 0 || f > math.MaxUint32 || f != math.Trunc(f) {
			return badRequest("\"prompt\" token id at position %d (%s) is not a non-negative integer", i, truncate(string(it), 20))
		}
		b.Tokens[i] = uint32(f)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
