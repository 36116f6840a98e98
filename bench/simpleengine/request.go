package simpleengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// request is what the engine needs of an OpenAI completion or chat request.
type request struct {
	chat         bool
	model        string
	prompt       string // the prompt as text (chat: "role: content" lines; token ids: decimal)
	promptTokens int    // an estimate: whitespace-separated words (or the ids given)
	maxTokens    int
	stream       bool
	includeUsage bool
}

// maxTokensLimit bounds max_tokens so a request cannot keep the engine busy for hours.
const maxTokensLimit = 1 << 16

type wireRequest struct {
	Model               *string         `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            json.RawMessage `json:"messages"`
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

// parseRequest reads a /v1/completions (chat false) or /v1/chat/completions body. Errors name
// the problem in a sentence a client can act on.
func parseRequest(body []byte, chat bool, defaultMaxTokens int) (request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return request{}, fmt.Errorf("the body is not a JSON request object: %v", err)
	}
	if w.Model == nil {
		return request{}, errors.New(`the request has no "model"`)
	}
	r := request{chat: chat, model: *w.Model, stream: w.Stream, maxTokens: defaultMaxTokens}
	r.includeUsage = w.StreamOptions != nil && w.StreamOptions.IncludeUsage
	if mt := w.MaxCompletionTokens; mt != nil {
		r.maxTokens = *mt
	}
	if mt := w.MaxTokens; mt != nil {
		r.maxTokens = *mt
	}
	if r.maxTokens < 1 || r.maxTokens > maxTokensLimit {
		return request{}, fmt.Errorf("max_tokens is %d: use a value from 1 to %d", r.maxTokens, maxTokensLimit)
	}
	var err error
	if chat {
		r.prompt, err = chatPrompt(w.Messages)
	} else {
		r.prompt, r.promptTokens, err = completionPrompt(w.Prompt)
	}
	if err != nil {
		return request{}, err
	}
	if r.promptTokens == 0 {
		r.promptTokens = len(strings.Fields(r.prompt))
	}
	return r, nil
}

// completionPrompt accepts the four prompt forms of the OpenAI API: a string, a list of strings,
// a list of token ids, a list of lists of token ids. A list is joined (the engine answers one
// choice). The form is told by the first bytes, so the prompt is decoded once.
func completionPrompt(raw json.RawMessage) (string, int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", 0, errors.New(`a completion request needs "prompt"`)
	}
	bad := errors.New(`"prompt" must be a string, a list of strings, a list of token ids or a list of lists of token ids`)
	var err error
	switch first := bytes.TrimLeft(raw[1:], " \t\r\n"); {
	case raw[0] == '"':
		var s string
		if err = json.Unmarshal(raw, &s); err == nil {
			return s, 0, nil
		}
	case raw[0] != '[' || len(first) == 0 || first[0] == ']':
	case first[0] == '"':
		var ss []string
		if err = json.Unmarshal(raw, &ss); err == nil {
			return strings.Join(ss, "\n"), 0, nil
		}
	case first[0] == '[':
		var lists [][]int64
		if err = json.Unmarshal(raw, &lists); err == nil {
			var parts []string
			n := 0
			for _, l := range lists {
				parts = append(parts, idsText(l))
				n += len(l)
			}
			return strings.Join(parts, "\n"), n, nil
		}
	default:
		var ids []int64
		if err = json.Unmarshal(raw, &ids); err == nil {
			return idsText(ids), len(ids), nil
		}
	}
	if err != nil {
		return "", 0, fmt.Errorf("%w: %v", bad, err)
	}
	return "", 0, bad
}

func idsText(ids []int64) string {
	var b strings.Builder
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	return b.String()
}

// chatPrompt renders the messages as "role: content" lines; content is a string or a list of
// parts whose "text" fields are joined.
func chatPrompt(raw json.RawMessage) (string, error) {
	var msgs []wireMessage
	if err := json.Unmarshal(raw, &msgs); err != nil || len(msgs) == 0 {
		return "", errors.New(`a chat request needs a non-empty "messages" list of {"role", "content"} objects`)
	}
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		var s string
		var parts []struct {
			Text string `json:"text"`
		}
		switch {
		case len(m.Content) == 0 || bytes.Equal(m.Content, []byte("null")):
		case json.Unmarshal(m.Content, &s) == nil:
			b.WriteString(s)
		case json.Unmarshal(m.Content, &parts) == nil:
			for _, p := range parts {
				b.WriteString(p.Text)
			}
		default:
			return "", errors.New(`a message "content" must be a string or a list of {"type": "text", "text": ...} parts`)
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}
