package tokenize

import (
	"errors"
	"fmt"
)

// Fallback reasons: short, stable strings for metric labels and the picker's explain header.
const (
	ReasonTokenizer       = "tokenizer_unsupported"  // the tokenizer.json uses a feature this package refuses
	ReasonNoTemplate      = "no_chat_template"       // the model ships no chat template
	ReasonContentFormat   = "openai_content_format"  // the template iterates over content parts
	ReasonContentPart     = "non_text_content"       // images, audio, ... in the messages
	ReasonRequestTemplate = "request_chat_template"  // the request brings its own chat_template
	ReasonRequestOption   = "unsupported_option"     // continue_final_message, documents, ...
	ReasonToolSchema      = "tool_schema"            // tools with fields vLLM would re-serialize differently
	ReasonJSONValue       = "json_value"             // floats, U+2028/2029 or huge ints where tojson would differ
	ReasonTemplateError   = "template_error"         // the template failed to render (vLLM would answer 400)
	ReasonBadRequest      = "bad_request"            // the body is not a chat request
	ReasonEngine          = "engine_tokenize_failed" // the engine's /tokenize failed or timed out
)

// UnsupportedError says why a request (or tokenizer) cannot be tokenized exactly here. It matches
// ErrUnsupported under errors.Is.
type UnsupportedError struct {
	Reason string // one of the Reason constants
	Detail string // what exactly, for logs
}

func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("%s (%s): %v", e.Detail, e.Reason, ErrUnsupported)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

func unsupportedReason(reason, format string, args ...any) error {
	return &UnsupportedError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Reason returns the fallback reason of err for metrics and the explain header: the Reason of an
// UnsupportedError in its chain, ReasonEngine for EngineClient failures, "" for nil, else "error".
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var u *UnsupportedError
	if errors.As(err, &u) {
		return u.Reason
	}
	var e *EngineError
	if errors.As(err, &e) {
		return ReasonEngine
	}
	return "error"
}
