package extproc

import (
	"bytes"
	"encoding/json"
	"errors"
)

// referenceParseBody is the body parser ParseBody replaced (decision 1110): encoding/json
// validates and splits the body, then the id lists are scanned. FuzzParseBody holds
// ParseBody to its answers and its error messages.
func referenceParseBody(path string, body []byte) (Body, error) {
	var req struct {
		Model    json.RawMessage `json:"model"`
		Prompt   json.RawMessage `json:"prompt"`
		Messages json.RawMessage `json:"messages"`
		Salt     json.RawMessage `json:"cache_salt"`
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return Body{}, badRequest("the request body is empty: send a JSON object with \"model\"")
	}
	err := json.Unmarshal(body, &req)
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr) && typeErr.Field == "", err == nil && refIsNull(body):
		// A top-level null leaves the struct untouched, without an error; it is not an
		// object either, and saying so is the clearer error.
		return Body{}, badRequest("the request body is JSON but not an object: send {\"model\": ..., ...}")
	case err != nil:
		return Body{}, badRequest("the request body is not valid JSON: %v", err)
	}
	var b Body
	if refIsNull(req.Model) {
		return Body{}, badRequest("the request body has no \"model\": name the model to use")
	}
	if err := json.Unmarshal(req.Model, &b.Model); err != nil || b.Model == "" {
		return Body{}, badRequest("\"model\" must be a non-empty string")
	}
	if !refIsNull(req.Salt) {
		if err := json.Unmarshal(req.Salt, &b.CacheSalt); err != nil || b.CacheSalt == "" {
			return Body{}, badRequest("\"cache_salt\" must be a non-empty string when given (vLLM refuses any other)")
		}
	}
	switch path {
	case PathCompletions:
		if refIsNull(req.Prompt) {
			return Body{}, badRequest("a completions request needs \"prompt\": a string, a list of strings, or token ids")
		}
		if err := refParsePrompt(req.Prompt, &b); err != nil {
			return Body{}, err
		}
	case PathChatCompletions:
		if refIsNull(req.Messages) {
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

func refIsNull(m json.RawMessage) bool {
	return len(m) == 0 || string(bytes.TrimSpace(m)) == "null"
}

// parsePrompt fills b from a prompt in any of its four OpenAI shapes. raw is valid JSON
// (the body was validated as a whole), which the scanners below rely on.
func refParsePrompt(raw json.RawMessage, b *Body) error {
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
		ids, err := refParseIDList(inner[:end+1])
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return badRequest("\"prompt\"[0] must be a non-empty list of token ids")
		}
		b.Tokens = ids
		return nil
	}
	ids, err := refParseIDList(raw)
	b.Tokens = ids
	return err
}

// parseIDList reads a JSON array of token ids without reflection (a long prompt has
// thousands): each element must be a non-negative integer below 2^32 (1.0 and 1e3 count).
func refParseIDList(raw []byte) ([]uint32, error) {
	ids := make([]uint32, 0, len(raw)/5)
	i := 1 // past '['
	for n := 0; ; n++ {
		i = refSkipSpace(raw, i)
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
		i = refSkipSpace(raw, i)
		if i >= len(raw) || raw[i] == ']' {
			return ids, nil
		}
		i++ // ','
	}
}

func refSkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}
