package simpleengine

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// writer renders one request's output in vLLM's OpenAI format: server-sent events when
// streaming, one JSON object otherwise.
type writer struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	req     request
	model   string
	id      string
	created int64
	text    strings.Builder // the whole completion, for a non-streamed answer
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type delta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type choice struct {
	Index        int     `json:"index"`
	Text         *string `json:"text,omitempty"`
	Delta        *delta  `json:"delta,omitempty"`
	Message      *delta  `json:"message,omitempty"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type chunk struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *usage   `json:"usage,omitempty"`
}

func newWriter(w http.ResponseWriter, req request, model, id string, created int64) *writer {
	if req.chat {
		id = "chatcmpl-" + id
	} else {
		id = "cmpl-" + id
	}
	return &writer{w: w, rc: http.NewResponseController(w), req: req, model: model, id: id, created: created}
}

// tokenText is the text of generated token i.
func tokenText(i int) string { return " t" + strconv.Itoa(i) }

func (o *writer) object() string {
	switch {
	case o.req.chat && o.req.stream:
		return "chat.completion.chunk"
	case o.req.chat:
		return "chat.completion"
	}
	return "text_completion"
}

func (o *writer) usage() *usage {
	return &usage{PromptTokens: o.req.promptTokens, CompletionTokens: o.req.maxTokens,
		TotalTokens: o.req.promptTokens + o.req.maxTokens}
}

// token emits generated token i (streaming) or keeps it for the final object.
func (o *writer) token(i int) error {
	t := tokenText(i)
	if !o.req.stream {
		o.text.WriteString(t)
		return nil
	}
	if i == 0 {
		o.w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		o.w.Header().Set("Cache-Control", "no-cache")
		o.w.WriteHeader(http.StatusOK)
		if o.req.chat {
			if err := o.event(o.chunk(choice{Delta: &delta{Role: "assistant"}}, nil)); err != nil {
				return err
			}
		}
	}
	c := choice{}
	if o.req.chat {
		c.Delta = &delta{Content: t}
	} else {
		c.Text = &t
	}
	if i == o.req.maxTokens-1 {
		c.FinishReason = ptr("length")
	}
	return o.event(o.chunk(c, nil))
}

// finish ends the answer: the usage chunk (when asked) and [DONE], or the JSON object.
func (o *writer) finish() error {
	if !o.req.stream {
		t := o.text.String()
		c := choice{FinishReason: ptr("length")}
		if o.req.chat {
			c.Message = &delta{Role: "assistant", Content: t}
		} else {
			c.Text = &t
		}
		o.w.Header().Set("Content-Type", "application/json")
		return json.NewEncoder(o.w).Encode(o.chunk(c, o.usage()))
	}
	if o.req.includeUsage {
		if err := o.event(chunk{ID: o.id, Object: o.object(), Created: o.created, Model: o.model,
			Choices: []choice{}, Usage: o.usage()}); err != nil {
			return err
		}
	}
	if _, err := o.w.Write([]byte("data: [DONE]\n\n")); err != nil {
		return err
	}
	return o.rc.Flush()
}

func (o *writer) chunk(c choice, u *usage) chunk {
	return chunk{ID: o.id, Object: o.object(), Created: o.created, Model: o.model, Choices: []choice{c}, Usage: u}
}

func (o *writer) event(c chunk) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	b = append(append([]byte("data: "), b...), '\n', '\n')
	if _, err := o.w.Write(b); err != nil {
		return err
	}
	return o.rc.Flush()
}

func ptr[T any](v T) *T { return &v }
