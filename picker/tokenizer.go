package picker

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/loadaware/loadaware-epp/tokenize"
)

// Tokens is the Tokenizer the service uses: the local tokenizer when it can reproduce
// the engines' ids exactly, else the engine's POST /tokenize.
type Tokens struct {
	Local   *tokenize.Tokenizer    // nil: every prompt goes to an engine (--tokenizer-from-engine)
	Engine  *tokenize.EngineClient // nil: no engine fallback
	Metrics *tokenize.Metrics      // nil: none
}

// Tokenize implements Tokenizer. Completions are encoded with special tokens (vLLM's
// add_special_tokens=True default); chats are rendered with the model's template.
func (t *Tokens) Tokenize(ctx context.Context, r Request, endpoints []string) ([]uint32, error) {
	start := time.Now()
	if t.Local != nil {
		if r.ChatBody == nil {
			ids := t.Local.Encode(r.Prompt, true)
			t.observe("completion", start)
			return ids, nil
		}
		ids, err := t.Local.EncodeChat(r.ChatBody)
		if err == nil {
			t.observe("chat", start)
			return ids, nil
		}
		if !errors.Is(err, tokenize.ErrUnsupported) {
			return nil, err
		}
		t.fallback(tokenize.Reason(err))
		if t.Engine == nil {
			return nil, err
		}
	}
	if t.Engine == nil {
		return nil, errors.New("no tokenizer and no engine fallback configured")
	}
	if len(endpoints) == 0 {
		return nil, errors.New("no engine to ask for token ids")
	}
	addr := endpoints[spread(r.RequestID, len(endpoints))]
	start = time.Now()
	var (
		ids []uint32
		err error
	)
	if r.ChatBody != nil {
		ids, err = t.Engine.TokenizeChat(ctx, addr, r.ChatBody)
	} else {
		ids, err = t.Engine.TokenizePrompt(ctx, addr, r.Model, r.Prompt)
	}
	if err != nil {
		t.fallback(tokenize.Reason(err))
		return nil, fmt.Errorf("%s: %w", tokenize.Reason(err), err)
	}
	t.observe("engine", start)
	return ids, nil
}

func (t *Tokens) observe(kind string, start time.Time) {
	if t.Metrics != nil {
		t.Metrics.Observe(kind, start)
	}
}

func (t *Tokens) fallback(reason string) {
	if t.Metrics != nil {
		t.Metrics.Fallback(reason)
	}
}

// spread picks one of n engines for a request id, so /tokenize calls spread over the fleet.
func spread(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}
