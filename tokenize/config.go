package tokenize

import (
	"encoding/json"
	"fmt"
)

// tokenizerConfig is the part of tokenizer_config.json this package reads.
type tokenizerConfig struct {
	ChatTemplate            json.RawMessage   `json:"chat_template"`
	BOSToken                json.RawMessage   `json:"bos_token"`
	EOSToken                json.RawMessage   `json:"eos_token"`
	UNKToken                json.RawMessage   `json:"unk_token"`
	PADToken                json.RawMessage   `json:"pad_token"`
	SEPToken                json.RawMessage   `json:"sep_token"`
	CLSToken                json.RawMessage   `json:"cls_token"`
	MaskToken               json.RawMessage   `json:"mask_token"`
	AdditionalSpecialTokens []json.RawMessage `json:"additional_special_tokens"`
	AddBOSToken             *bool             `json:"add_bos_token"`
	AddEOSToken             *bool             `json:"add_eos_token"`
	TokenizerClass          string            `json:"tokenizer_class"`

	templateFile string // chat_template.jinja beside it, if any
}

// tokenString reads a special token given as a string or as an AddedToken object; "" when absent.
func tokenString(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("special token %s is neither a string nor an AddedToken", raw)
	}
	return obj.Content, nil
}

// llamaClasses are the transformers tokenizer classes whose constructor replaces the
// post-processor with one built from add_bos_token / add_eos_token (LlamaTokenizerFast's
// update_post_processor), so their tokenizer.json post_processor is not what vLLM uses.
var llamaClasses = map[string]bool{"LlamaTokenizer": true, "LlamaTokenizerFast": true}

type addedTokenInfo = []struct {
	ID         uint32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

func (t *Tokenizer) applyConfig(cfg *tokenizerConfig, added addedTokenInfo) error {
	ids := map[string]uint32{}
	for _, a := range added {
		ids[a.Content] = a.ID
	}
	specials := map[string]any{}
	for name, raw := range map[string]json.RawMessage{
		"bos_token": cfg.BOSToken, "eos_token": cfg.EOSToken, "unk_token": cfg.UNKToken, "pad_token": cfg.PADToken,
		"sep_token": cfg.SEPToken, "cls_token": cfg.CLSToken, "mask_token": cfg.MaskToken,
	} {
		s, err := tokenString(raw)
		if err != nil {
			return fmt.Errorf("tokenizer_config.json %s: %w", name, err)
		}
		if s != "" {
			specials[name] = s
		}
	}
	var extra []any
	for _, raw := range cfg.AdditionalSpecialTokens {
		s, err := tokenString(raw)
		if err != nil {
			return fmt.Errorf("tokenizer_config.json additional_special_tokens: %w", err)
		}
		extra = append(extra, s)
	}
	if len(extra) > 0 {
		specials["additional_special_tokens"] = extra
	}
	if llamaClasses[cfg.TokenizerClass] {
		addBOS := cfg.AddBOSToken == nil || *cfg.AddBOSToken
		addEOS := cfg.AddEOSToken != nil && *cfg.AddEOSToken
		t.prefix, t.suffix = nil, nil
		for _, want := range []struct {
			on   bool
			name string
			dst  *[]uint32
		}{{addBOS, "bos_token", &t.prefix}, {addEOS, "eos_token", &t.suffix}} {
			if !want.on {
				continue
			}
			s, _ := specials[want.name].(string)
			id, ok := ids[s]
			if !ok {
				if id, ok = t.model.vocab[s]; !ok {
					return fmt.Errorf("tokenizer_config.json: %s %q is not a token", want.name, s)
				}
			}
			*want.dst = []uint32{id}
		}
	}
	tmpl, err := chatTemplateSource(cfg)
	if err != nil {
		return err
	}
	if tmpl != "" {
		r, err := newChatRenderer(tmpl, specials)
		if err != nil {
			return err
		}
		t.chat = r
	}
	return nil
}

// chatTemplateSource picks the default chat template: chat_template.jinja, else the
// tokenizer_config.json string, else its entry named "default".
func chatTemplateSource(cfg *tokenizerConfig) (string, error) {
	if cfg.templateFile != "" {
		return cfg.templateFile, nil
	}
	if isNull(cfg.ChatTemplate) {
		return "", nil
	}
	var s string
	if json.Unmarshal(cfg.ChatTemplate, &s) == nil {
		return s, nil
	}
	var named []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(cfg.ChatTemplate, &named); err != nil {
		return "", fmt.Errorf("tokenizer_config.json chat_template is neither a string nor a list of named templates")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", nil
}
