package extproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
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
		m := bytes.TrimSpace(req.Messages) // valid JSON: a list starts with '[', an empty one is "[ ]"
		if m[0] != '[' {
			return Body{}, badRequest("\"messages\" must be a list of {\"role\", \"content\"} objects")
		}
		if bytes.TrimSpace(m[1:])[0] == ']' {
			return Body{}, badRequest("\"messages\" is empty: send at least one message")
		}
		b.Chat = true
	}
	return b, nil
}

func isNull(m json.RawMessage) bool {
	return len(m) == 0 || string(bytes.TrimSpace(m)) == "null"
}

// parsePrompt fills b from a prompt in any of its four OpenAI shapes. raw is valid JSON
// (the body was validated as a whole), which the scanners below rely on.
func parsePrompt(raw json.RawMessage, b *Body) error {
	raw = bytes.TrimSpace(raw)
	switch raw[0] {
	case '"':
		return json.Unmarshal(raw, &b.Prompt)
	case '[':
	default:
		return badRequest("\"prompt\" must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	inner := bytes.TrimLeft(raw[1:], " \t\r\n")
	switch {
	case inner[0] == ']':
		return badRequest("\"prompt\" is an empty list: send the prompt text or its token ids")
	case inner[0] == '"':
		var items []string
		if err := json.Unmarshal(raw, &items); err != nil {
			return badRequest("\"prompt\" must be a list of strings or of token ids, not a mix: %v", err)
		}
		b.Prompt = items[0]
		return nil
	case inner[0] == '[':
		end := bytes.IndexByte(inner, ']')
		ids, err := parseIDList(inner[:end+1])
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return badRequest("\"prompt\"[0] must be a non-empty list of token ids")
		}
		b.Tokens = ids
		return nil
	}
	ids, err := parseIDList(raw)
	b.Tokens = ids
	return err
}

// parseIDList reads a JSON array of token ids without reflection (a long prompt has
// thousands): each element must be a non-negative integer below 2^32 (1.0 and 1e3 count).
func parseIDList(raw []byte) ([]uint32, error) {
	ids := make([]uint32, 0, len(raw)/5)
	i := 1 // past '['
	for n := 0; ; n++ {
		i = skipSpace(raw, i)
		if raw[i] == ']' && n == 0 {
			return ids, nil
		}
		start := i
		for i < len(raw) && raw[i] != ',' && raw[i] != ']' && raw[i] != ' ' && raw[i] != '\t' && raw[i] != '\r' && raw[i] != '\n' {
			i++
		}
		v, ok := tokenID(raw[start:i])
		if !ok {
			return nil, badRequest("\"prompt\" token id at position %d (%s) is not a non-negative integer", n, truncate(string(raw[start:i]), 20))
		}
		ids = append(ids, v)
		i = skipSpace(raw, i)
		if i >= len(raw) || raw[i] == ']' {
			return ids, nil
		}
		i++ // ','
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// tokenID reads one JSON number as a token id.
func tokenID(tok []byte) (uint32, bool) {
	if len(tok) == 0 {
		return 0, false
	}
	var v uint64
	for _, c := range tok {
		if c < '0' || c > '9' {
			return slowTokenID(tok)
		}
		v = v*10 + uint64(c-'0')
		if v > math.MaxUint32 {
			return 0, false
		}
	}
	return uint32(v), true
}

// slowTokenID handles the rare ids written with a fraction or an exponent.
func slowTokenID(tok []byte) (uint32, bool) {
	f, err := strconv.ParseFloat(string(tok), 64)
	if err != nil || f < 0 || f > math.MaxUint32 || f != math.Trunc(f) {
		return 0, false
	}
	return uint32(f), true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
