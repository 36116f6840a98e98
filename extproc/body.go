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
	// CacheSalt is the body's "cache_salt" (vLLM's per-request prefix cache isolation,
	// folded into the first block's hash); empty when absent or null.
	CacheSalt string
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
// first prompt). /v1/chat/completions needs a non-empty "messages" list. A "cache_salt",
// when present and not null, must be a non-empty string, as vLLM requires. Errors are
// *BadRequestError with a sentence a client can act on.
//
// It accepts and refuses exactly the bodies encoding/json's Unmarshal into a struct of the
// four fields would (keys matched case-insensitively, the last of a repeated key winning),
// in one pass over the bytes and without reflection; only a refused body is handed to
// encoding/json again, for its description of what is wrong.
func ParseBody(path string, body []byte) (Body, error) { return parseBody(path, body, nil) }

// parseBody is ParseBody decoding the prompt's token ids into ids' array when it has room
// for them (Body.Tokens then shares it), else into a new one; ids' contents are overwritten.
// A stream passes the ids of its last request, so that a request with ids allocates none.
func parseBody(path string, body []byte, ids []uint32) (Body, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return Body{}, badRequest("the request body is empty: send a JSON object with \"model\"")
	}
	s := scan{b: body, prompt: prompt{ids: ids[:0]}}
	if !s.run() {
		return Body{}, badRequest("the request body is not valid JSON: %v", syntaxError(body))
	}
	if !s.object {
		return Body{}, badRequest("the request body is JSON but not an object: send {\"model\": ..., ...}")
	}
	var b Body
	if s.model == nil || string(s.model) == "null" {
		return Body{}, badRequest("the request body has no \"model\": name the model to use")
	}
	if s.model[0] != '"' || len(s.model) == 2 {
		return Body{}, badRequest("\"model\" must be a non-empty string")
	}
	b.Model = string(unquote(s.model))
	if s.salt != nil && string(s.salt) != "null" {
		if s.salt[0] != '"' || len(s.salt) == 2 {
			return Body{}, badRequest("\"cache_salt\" must be a non-empty string when given (vLLM refuses any other)")
		}
		b.CacheSalt = string(unquote(s.salt))
	}
	switch path {
	case PathCompletions:
		if err := s.prompt.fill(&b); err != nil {
			return Body{}, err
		}
	case PathChatCompletions:
		m := s.messages
		switch {
		case m == nil || string(m) == "null":
			return Body{}, badRequest("a chat completions request needs \"messages\": a list of {\"role\", \"content\"} objects")
		case m[0] != '[':
			return Body{}, badRequest("\"messages\" must be a list of {\"role\", \"content\"} objects")
		case bytes.TrimLeft(m[1:], " \t\r\n")[0] == ']':
			return Body{}, badRequest("\"messages\" is empty: send at least one message")
		}
		b.Chat = true
	}
	return b, nil
}

// syntaxError is encoding/json's description of what is wrong with body, which the scan
// found invalid.
func syntaxError(body []byte) error {
	var v json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return err
	}
	return errors.New("refused by the body scanner") // never: the scan and encoding/json agree (FuzzParseBody)
}

// fill sets b's prompt from the scanned "prompt" value in any of its four OpenAI shapes.
func (p *prompt) fill(b *Body) error {
	if !p.seen || string(p.raw) == "null" {
		return badRequest("a completions request needs \"prompt\": a string, a list of strings, or token ids")
	}
	switch p.kind {
	case promptString:
		b.Prompt = string(unquote(p.first))
	case promptEmpty:
		return badRequest("\"prompt\" is an empty list: send the prompt text or its token ids")
	case promptStrings:
		if p.mixed {
			var items []string
			return badRequest("\"prompt\" must be a list of strings or of token ids, not a mix: %v", json.Unmarshal(p.raw, &items))
		}
		b.Prompt = string(unquote(p.first))
	case promptNested, promptIDs:
		if p.badPos >= 0 {
			return badRequest("\"prompt\" token id at position %d (%s) is not a non-negative integer", p.badPos, truncate(string(elementText(p.bad)), 20))
		}
		if len(p.ids) == 0 {
			return badRequest("\"prompt\"[0] must be a non-empty list of token ids")
		}
		b.Tokens = p.ids
	default:
		return badRequest("\"prompt\" must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	return nil
}

// elementText is what the error for a bad token id quotes: the bytes of the element that
// starts b up to the next ',', ']' or whitespace.
func elementText(b []byte) []byte {
	end := 0
	for end < len(b) && b[end] != ',' && b[end] != ']' && b[end] != ' ' && b[end] != '\t' && b[end] != '\r' && b[end] != '\n' {
		end++
	}
	return b[:end]
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
