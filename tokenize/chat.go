package tokenize

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"
)

// chatRenderer renders a model's chat template as transformers' apply_chat_template does
// (trim_blocks, lstrip_blocks, special tokens as variables), on messages preprocessed as vLLM does.
type chatRenderer struct {
	tmpl          *jinja.Template
	specials      map[string]jinja.Value
	contentFormat string // "" when the template can be rendered exactly, else a reason detail
}

// contentLoop finds templates that iterate over a message's content parts: vLLM then passes
// content as a list of {"type": "text", ...} parts ("openai" content format), which this renderer
// does not reproduce.
var contentLoop = regexp.MustCompile(`\{%-?\s*for\s+\w+\s+in\s+[\w.\[\]'"]*content\b`)

func newChatRenderer(src string, specials map[string]any) (*chatRenderer, error) {
	tmpl, err := jinja.Compile(src)
	if err != nil {
		return nil, fmt.Errorf("compile the chat template: %w", err)
	}
	r := &chatRenderer{tmpl: tmpl, specials: map[string]jinja.Value{}}
	for k, v := range specials {
		r.specials[k] = jinja.FromGoValue(v)
	}
	if contentLoop.MatchString(src) {
		r.contentFormat = "the chat template iterates over message content parts"
	}
	return r, nil
}

// EncodeChat returns the prompt token ids vLLM computes for a /v1/chat/completions request body:
// the messages (and tools) rendered with the model's chat template after vLLM's preprocessing,
// then encoded without special tokens unless the request sets add_special_tokens. A request this
// package cannot reproduce exactly returns an *UnsupportedError (errors.Is(err, ErrUnsupported)).
func (t *Tokenizer) EncodeChat(body []byte) ([]uint32, error) {
	text, addSpecial, err := t.RenderChat(body)
	if err != nil {
		return nil, err
	}
	return t.Encode(text, addSpecial), nil
}

// RenderChat returns the prompt text vLLM renders for a chat request body and whether it is
// encoded with special tokens.
func (t *Tokenizer) RenderChat(body []byte) (string, bool, error) {
	if t.chat == nil {
		return "", false, unsupportedReason(ReasonNoTemplate, "the tokenizer has no chat template (tokenizer_config.json chat_template or chat_template.jinja)")
	}
	if t.chat.contentFormat != "" {
		return "", false, unsupportedReason(ReasonContentFormat, "%s", t.chat.contentFormat)
	}
	req, err := parseChatRequest(body)
	if err != nil {
		return "", false, err
	}
	data := make(map[string]jinja.Value, len(t.chat.specials)+8)
	for k, v := range t.chat.specials {
		data[k] = v
	}
	for _, k := range req.kwargs.Keys {
		data[k] = req.kwargs.Data[k]
	}
	data["messages"] = req.messages
	data["tools"] = req.tools
	data["documents"] = jinja.None()
	data["add_generation_prompt"] = jinja.NewBool(req.addGenerationPrompt)
	out, err := t.chat.tmpl.RenderValues(data)
	if err != nil {
		return "", false, unsupportedReason(ReasonTemplateError, "render the chat template: %v", err)
	}
	return out, req.addSpecial, nil
}

type chatRequest struct {
	messages            jinja.Value
	tools               jinja.Value
	kwargs              *jinja.Dict
	addGenerationPrompt bool
	addSpecial          bool
}

// reservedKwargs are template variables a request's chat_template_kwargs may not override here.
var reservedKwargs = map[string]bool{"messages": true, "tools": true, "documents": true, "add_generation_prompt": true,
	"continue_final_message": true, "chat_template": true, "tokenize": true, "conversation": true}

func parseChatRequest(body []byte) (*chatRequest, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	top, err := decodeValue(dec)
	if err == nil {
		if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err != nil {
		var u *UnsupportedError
		if errors.As(err, &u) {
			return nil, err
		}
		return nil, unsupportedReason(ReasonBadRequest, "chat request body: %v", err)
	}
	if !top.IsDict() {
		return nil, unsupportedReason(ReasonBadRequest, "chat request body is not a JSON object")
	}
	body2 := top.AsDict()
	req := &chatRequest{addGenerationPrompt: true, tools: jinja.None(), kwargs: jinja.NewDict().AsDict()}
	get := func(k string) (jinja.Value, bool) {
		v, ok := body2.Get(k)
		if ok && v.IsNone() {
			return v, false
		}
		return v, ok
	}
	if _, ok := get("chat_template"); ok {
		return nil, unsupportedReason(ReasonRequestTemplate, "the request sets chat_template")
	}
	for _, k := range []string{"documents", "mm_processor_kwargs"} {
		if _, ok := get(k); ok {
			return nil, unsupportedReason(ReasonRequestOption, "the request sets %s", k)
		}
	}
	if v, ok := get("continue_final_message"); ok && v.IsTruthy() {
		return nil, unsupportedReason(ReasonRequestOption, "the request sets continue_final_message")
	}
	if v, ok := get("add_generation_prompt"); ok {
		if !v.IsBool() {
			return nil, unsupportedReason(ReasonBadRequest, "add_generation_prompt is not a boolean")
		}
		req.addGenerationPrompt = v.AsBool()
	}
	if v, ok := get("add_special_tokens"); ok {
		if !v.IsBool() {
			return nil, unsupportedReason(ReasonBadRequest, "add_special_tokens is not a boolean")
		}
		req.addSpecial = v.AsBool()
	}
	if v, ok := get("chat_template_kwargs"); ok {
		if !v.IsDict() {
			return nil, unsupportedReason(ReasonBadRequest, "chat_template_kwargs is not an object")
		}
		for _, k := range v.AsDict().Keys {
			if reservedKwargs[k] {
				return nil, unsupportedReason(ReasonRequestOption, "chat_template_kwargs sets %q", k)
			}
		}
		req.kwargs = v.AsDict()
	}
	msgs, ok := get("messages")
	if !ok || !msgs.IsList() || msgs.AsList().Len() == 0 {
		return nil, unsupportedReason(ReasonBadRequest, "the request has no messages list")
	}
	conv := make([]jinja.Value, 0, msgs.AsList().Len())
	for i, m := range msgs.AsList().Items {
		cm, err := preprocessMessage(m)
		if err != nil {
			var u *UnsupportedError
			if errors.As(err, &u) {
				u.Detail = fmt.Sprintf("message %d: %s", i, u.Detail)
			}
			return nil, err
		}
		conv = append(conv, cm)
	}
	req.messages = jinja.NewList(conv)
	if v, ok := get("tools"); ok {
		tools, err := preprocessTools(v)
		if err != nil {
			return nil, err
		}
		req.tools = tools
	}
	return req, nil
}

// preprocessMessage builds vLLM's ConversationMessage (chat_utils._parse_chat_message_content with
// the "string" content format, then _postprocess_messages): role, content as one string (text
// parts joined with "\n", null as ""), then tool_calls with parsed arguments, reasoning,
// tool_call_id, name, task.
func preprocessMessage(m jinja.Value) (jinja.Value, error) {
	if !m.IsDict() {
		return jinja.Value{}, unsupportedReason(ReasonBadRequest, "not an object")
	}
	in := m.AsDict()
	role, ok := in.Get("role")
	if !ok || !role.IsString() {
		return jinja.Value{}, unsupportedReason(ReasonBadRequest, "no role string")
	}
	r := role.AsString()
	if r == "developer" {
		return jinja.Value{}, unsupportedReason(ReasonRequestOption, "developer messages")
	}
	content, err := messageContent(in)
	if err != nil {
		return jinja.Value{}, err
	}
	out := jinja.NewDict()
	d := out.AsDict()
	d.Set("role", role)
	d.Set("content", jinja.NewString(content))
	switch r {
	case "assistant":
		if tc, ok := in.Get("tool_calls"); ok && !tc.IsNone() {
			if !tc.IsList() {
				return jinja.Value{}, unsupportedReason(ReasonBadRequest, "tool_calls is not a list")
			}
			if tc.AsList().Len() > 0 {
				calls, err := preprocessToolCalls(tc)
				if err != nil {
					return jinja.Value{}, err
				}
				d.Set("tool_calls", calls)
			}
		}
		if rs, ok := in.Get("reasoning"); ok && !rs.IsNone() {
			d.Set("reasoning", rs)
			d.Set("reasoning_content", rs)
		}
	case "tool":
		if id, ok := in.Get("tool_call_id"); ok {
			d.Set("tool_call_id", id)
		}
	}
	if name, ok := in.Get("name"); ok && name.IsString() {
		d.Set("name", name)
	}
	if task, ok := in.Get("task"); ok && task.IsString() {
		d.Set("task", task)
	}
	return out, nil
}

func messageContent(in *jinja.Dict) (string, error) {
	c, ok := in.Get("content")
	switch {
	case !ok || c.IsNone():
		return "", nil
	case c.IsString():
		return c.AsString(), nil
	case !c.IsList():
		return "", unsupportedReason(ReasonBadRequest, "content is neither a string nor a list of parts")
	}
	var texts []string
	for _, p := range c.AsList().Items {
		if p.IsString() {
			texts = append(texts, p.AsString())
			continue
		}
		if !p.IsDict() {
			return "", unsupportedReason(ReasonBadRequest, "a content part is neither a string nor an object")
		}
		pd := p.AsDict()
		typ, _ := pd.Get("type")
		if uuid, ok := pd.Get("uuid"); ok && !uuid.IsNone() {
			return "", unsupportedReason(ReasonContentPart, "a content part with a uuid")
		}
		key := ""
		if typ.IsString() {
			switch typ.AsString() {
			case "text", "input_text", "output_text":
				key = "text"
			case "refusal":
				key = "refusal"
			case "thinking":
				key = "thinking"
			}
		}
		if key == "" {
			return "", unsupportedReason(ReasonContentPart, "content part of type %s", typ)
		}
		v, ok := pd.Get(key)
		if !ok || v.IsNone() {
			if key == "thinking" {
				return "", unsupportedReason(ReasonBadRequest, "thinking part without text")
			}
			continue // vLLM skips text/refusal parts without content
		}
		if !v.IsString() {
			return "", unsupportedReason(ReasonBadRequest, "%s part is not a string", key)
		}
		texts = append(texts, v.AsString())
	}
	return strings.Join(texts, "\n"), nil
}

// preprocessToolCalls parses each call's function.arguments: a JSON string becomes its value
// ({} when it is not valid JSON), anything but an object or list becomes {}.
func preprocessToolCalls(tc jinja.Value) (jinja.Value, error) {
	for _, call := range tc.AsList().Items {
		if !call.IsDict() {
			return jinja.Value{}, unsupportedReason(ReasonBadRequest, "a tool call is not an object")
		}
		fn, ok := call.AsDict().Get("function")
		if !ok || !fn.IsDict() {
			return jinja.Value{}, unsupportedReason(ReasonBadRequest, "a tool call has no function object")
		}
		f := fn.AsDict()
		args, _ := f.Get("arguments")
		switch {
		case args.IsString():
			s := args.AsString()
			if strings.Contains(s, "NaN") || strings.Contains(s, "Infinity") {
				return jinja.Value{}, unsupportedReason(ReasonJSONValue, "tool call arguments may hold NaN/Infinity")
			}
			dec := json.NewDecoder(strings.NewReader(s))
			dec.UseNumber()
			v, err := decodeValue(dec)
			if err == nil {
				if _, extra := dec.Token(); extra != io.EOF {
					err = errors.New("trailing data")
				}
			}
			if err != nil {
				var u *UnsupportedError
				if errors.As(err, &u) {
					return jinja.Value{}, err
				}
				v = jinja.NewDict()
			}
			f.Set("arguments", v)
		case args.IsDict() || args.IsList():
		default:
			f.Set("arguments", jinja.NewDict())
		}
	}
	return tc, nil
}

// preprocessTools re-serializes tools as vLLM's ChatCompletionToolsParam.model_dump() does:
// {"type": "function", "function": {"name", "description", "parameters"}}, null when missing.
func preprocessTools(v jinja.Value) (jinja.Value, error) {
	if !v.IsList() {
		return jinja.Value{}, unsupportedReason(ReasonBadRequest, "tools is not a list")
	}
	out := make([]jinja.Value, 0, v.AsList().Len())
	for i, tool := range v.AsList().Items {
		if !tool.IsDict() {
			return jinja.Value{}, unsupportedReason(ReasonBadRequest, "tool %d is not an object", i)
		}
		td := tool.AsDict()
		for _, k := range td.Keys {
			if k != "type" && k != "function" {
				return jinja.Value{}, unsupportedReason(ReasonToolSchema, "tool %d has field %q", i, k)
			}
		}
		if typ, ok := td.Get("type"); ok && (!typ.IsString() || typ.AsString() != "function") {
			return jinja.Value{}, unsupportedReason(ReasonToolSchema, "tool %d is not of type function", i)
		}
		fn, ok := td.Get("function")
		if !ok || !fn.IsDict() {
			return jinja.Value{}, unsupportedReason(ReasonBadRequest, "tool %d has no function object", i)
		}
		fd := fn.AsDict()
		for _, k := range fd.Keys {
			if k != "name" && k != "description" && k != "parameters" {
				return jinja.Value{}, unsupportedReason(ReasonToolSchema, "tool %d function has field %q", i, k)
			}
		}
		name, ok := fd.Get("name")
		if !ok || !name.IsString() {
			return jinja.Value{}, unsupportedReason(ReasonBadRequest, "tool %d function has no name", i)
		}
		nf := jinja.NewDict()
		nf.AsDict().Set("name", name)
		for _, k := range []string{"description", "parameters"} {
			val, ok := fd.Get(k)
			if !ok {
				val = jinja.None()
			}
			if k == "description" && !val.IsNone() && !val.IsString() {
				return jinja.Value{}, unsupportedReason(ReasonBadRequest, "tool %d description is not a string", i)
			}
			if k == "parameters" && !val.IsNone() && !val.IsDict() {
				return jinja.Value{}, unsupportedReason(ReasonBadRequest, "tool %d parameters is not an object", i)
			}
			nf.AsDict().Set(k, val)
		}
		nt := jinja.NewDict()
		nt.AsDict().Set("type", jinja.NewString("function"))
		nt.AsDict().Set("function", nf)
		out = append(out, nt)
	}
	return jinja.NewList(out), nil
}

// decodeValue reads one JSON value into jinja values, keeping object key order (Python dicts
// keep it, and templates that tojson tools depend on it). Values whose rendering by the Go
// template engine would differ from Python's are refused: floats whose Python repr differs from
// Go's shortest form, integers beyond int64, and strings holding U+2028/U+2029 (Go's JSON
// encoder escapes them, Python's does not).
func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Value{}, err
				}
				k, _ := kt.(string)
				if strings.ContainsAny(k, "\u2028\u2029") {
					return jinja.Value{}, unsupportedReason(ReasonJSONValue, "a key holds U+2028/U+2029")
				}
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				d.AsDict().Set(k, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return d, nil
		case '[':
			var items []jinja.Value
			for dec.More() {
				val, err := decodeValue(dec)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, val)
			}
			if _, err := dec.Token(); err != nil {
				return jinja.Value{}, err
			}
			return jinja.NewList(items), nil
		}
		return jinja.Value{}, fmt.Errorf("unexpected %v", v)
	case string:
		if strings.ContainsAny(v, "\u2028\u2029") {
			return jinja.Value{}, unsupportedReason(ReasonJSONValue, "a string holds U+2028/U+2029")
		}
		return jinja.NewString(v), nil
	case json.Number:
		s := string(v)
		if !strings.ContainsAny(s, ".eE") {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return jinja.Value{}, unsupportedReason(ReasonJSONValue, "integer %s does not fit 64 bits", s)
			}
			return jinja.NewInt(n), nil
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsInf(f, 0) {
			return jinja.Value{}, unsupportedReason(ReasonJSONValue, "number %s", s)
		}
		if strconv.FormatFloat(f, 'g', -1, 64) != pyFloatRepr(f) {
			return jinja.Value{}, unsupportedReason(ReasonJSONValue, "float %s prints differently in Python", s)
		}
		return jinja.NewFloat(f), nil
	case bool:
		return jinja.NewBool(v), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// pyFloatRepr is Python's repr of a finite float: the shortest round-tripping digits, in
// positional form for exponents -4 <= e < 16 (with ".0" when integral), else d.ddde+XX.
func pyFloatRepr(f float64) string {
	digits := strconv.FormatFloat(math.Abs(f), 'e', -1, 64) // d.ddde±XX
	mant, expS, _ := strings.Cut(digits, "e")
	exp, _ := strconv.Atoi(expS)
	ds := strings.Replace(mant, ".", "", 1)
	sign := ""
	if math.Signbit(f) {
		sign = "-"
	}
	if exp < -4 || exp >= 16 {
		m := ds[:1]
		if len(ds) > 1 {
			m += "." + ds[1:]
		}
		es := fmt.Sprintf("%+03d", exp)
		return sign + m + "e" + es
	}
	if exp < 0 {
		return sign + "0." + strings.Repeat("0", -exp-1) + ds
	}
	if len(ds) <= exp+1 {
		return sign + ds + strings.Repeat("0", exp+1-len(ds)) + ".0"
	}
	return sign + ds[:exp+1] + "." + ds[exp+1:]
}
