package workload

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Conversations (ProfileConversations) restate inference-perf's
// conversation_replay data type (kubernetes-sigs/inference-perf,
// inference_perf/datagen/conversation_replay_datagen.py), which its
// code-generation and reasoning catalogs run.
//
// The workload has Conversations conversations, drawn from the pool seed
// alone (the source draws its blueprints from a fixed seed), so every seed
// replays the same conversations. Conversation c's system prompt is pool
// prefix c mod Prefixes (the shared system prompt) followed by a dynamic
// system prompt of its own, SystemTokens long; it has TurnTokens turns, each
// a user input of InputTokens and an answer of OutputTokens (its max_tokens).
// Turn k's prompt is the system prompt, every earlier turn's input and
// answer, and turn k's input, so a conversation's prompts extend one another.
//
// Send order follows the source's: conversation i mod Conversations is slot
// i's, and a slot sends its conversation's turns in order, starting again at
// turn 0 (the same prompts) when they run out. Timing is open loop, so every
// arm gets the same sends: a slot sends its next turn ToolLatency (drawn
// each time) plus a fixed wait after the last, the wait standing in for the
// time the source's closed loop waits for the answer, chosen so the slots
// together send Rate requests per second:
//
//	wait = Conversations/Rate - ToolLatency's mean
//
// (an error when negative: the conversations cannot send that fast). Slots
// start at offsets uniform in one period, and the seed is the first Requests
// sends.
//
// A prompt that does not fit Context with its answer is cut: an answer above
// half the context is first cut to half, then the prompt keeps its head and
// loses its tail (shared prefixes stay shared); Capped marks the request.

// conversation is one conversation's blueprint, built turn by turn as its
// prompts are first asked for.
type conversation struct {
	rng     *rand.Rand
	turns   int
	length  int      // tokens of the history so far, uncut
	toks    []uint32 // the history's first tokens, at most the context
	text    strings.Builder
	textEnd []int // textEnd[i]: the text's length after token i
	prompts []turnPrompt
	lastOut int // the last turn's answer length
}

// turnPrompt is one turn's request body, built once.
type turnPrompt struct {
	ids    []uint32
	text   string
	out    int
	capped bool
}

func (c Config) validateConversations() error {
	switch {
	case c.Conversations < 1 || c.Conversations > 100000:
		return fmt.Errorf("workload: -conversations %d: need 1..100000", c.Conversations)
	case c.Context < 2*(c.PrefixTokens+64):
		return fmt.Errorf("workload: -context %d: need at least twice the %d-token shared system prompt and 64 more", c.Context, c.PrefixTokens)
	}
	for _, d := range []struct {
		name string
		d    Dist
		min  float64
	}{{"-system-tokens", c.SystemTokens, 0}, {"-turn-count", c.TurnCount, 1}, {"-input-tokens", c.InputTokens, 1},
		{"-output-tokens", c.OutputTokens, 1}, {"-tool-latency", c.ToolLatency, 0}} {
		if err := d.d.validate(); err != nil {
			return fmt.Errorf("workload: %s %q: %w", d.name, d.d, err)
		}
		if d.d.Min < d.min {
			return fmt.Errorf("workload: %s %q: need min >= %g", d.name, d.d, d.min)
		}
		if math.IsInf(d.d.Max, 1) && d.name != "-tool-latency" {
			return fmt.Errorf("workload: %s %q: give a max (lengths are bounded)", d.name, d.d)
		}
	}
	if c.conversationWait() < 0 {
		return fmt.Errorf("workload: -rate %g: %d conversations a tool latency (mean %g s) apart send at most %.3g req/s: lower -rate or raise -conversations",
			c.Rate, c.Conversations, c.ToolLatency.Expected(), float64(c.Conversations)/c.ToolLatency.Expected())
	}
	return nil
}

// conversationWait is the fixed wait of a slot between turns, seconds.
func (c Config) conversationWait() float64 {
	return float64(c.Conversations)/c.Rate - c.ToolLatency.Expected()
}

// newConversation draws conversation i's blueprint from the pool seed: the
// pool prefix i mod Prefixes, then its dynamic system prompt
// "[S-<i>-0] ..." on a line of its own.
func newConversation(cfg Config, pool *Pool, i int) *conversation {
	c := &conversation{rng: rand.New(rand.NewPCG(cfg.PoolSeed, 0x636f6e76<<20+uint64(i)))}
	c.turns = max(1, cfg.TurnCount.DrawInt(c.rng))
	g := i % pool.Len()
	c.add(cfg, prefixTag(g), pool.texts[g], pool.tokens[g], false)
	if n := cfg.SystemTokens.DrawInt(c.rng); n > 0 {
		c.fillLine(cfg, chatTag('S', i, 0), n)
	}
	return c
}

// fillLine adds a newline and n tokens of tag and filler to the history.
func (c *conversation) fillLine(cfg Config, tag []piece, n int) {
	text, ids := fill(tag, max(n, len(tag)), c.rng)
	c.add(cfg, tag, "\n"+text, ids, true)
}

// add appends a piece of history (a newline token first, when newline)
// whose ids are tag then filler words, keeping at most the context's tokens
// and the text up to them.
func (c *conversation) add(cfg Config, tag []piece, text string, ids []uint32, newline bool) {
	lens := make([]int, 0, len(ids)+1)
	all := ids
	if newline {
		lens = append(lens, 1)
		all = append([]uint32{newlineID}, ids...)
	}
	for i, id := range ids {
		if i < len(tag) {
			lens = append(lens, len(tag[i].text))
		} else {
			lens = append(lens, 1+len(words[id-wordBase]))
		}
	}
	c.length += len(all)
	keep := min(len(all), cfg.Context-len(c.toks))
	if keep <= 0 {
		return
	}
	end := c.text.Len()
	for _, l := range lens[:keep] {
		end += l
		c.textEnd = append(c.textEnd, end)
	}
	c.text.WriteString(text[:end-c.text.Len()])
	c.toks = append(c.toks, all[:keep]...)
}

// prompt returns conversation i's turn k, building the history up to it.
func (c *conversation) prompt(cfg Config, i, k int) turnPrompt {
	for len(c.prompts) <= k {
		t := len(c.prompts)
		if t > 0 {
			c.fillLine(cfg, chatTag('A', i, t-1), c.lastOut)
		}
		in := cfg.InputTokens.DrawInt(c.rng)
		c.lastOut = max(cfg.OutputTokens.DrawInt(c.rng), 1)
		c.fillLine(cfg, chatTag('U', i, t), in)
		p := turnPrompt{out: c.lastOut}
		if p.out > cfg.Context/2 && c.length+p.out > cfg.Context {
			p.out, p.capped = cfg.Context/2, true
		}
		n := c.length
		if n+p.out > cfg.Context {
			n, p.capped = cfg.Context-p.out, true
		}
		p.ids = c.toks[:n:n]
		p.text = c.text.String()[:c.textEnd[n-1]]
		c.prompts = append(c.prompts, p)
	}
	return c.prompts[k]
}

// generateConversations returns a conversations seed's requests (see
// ProfileConversations).
func generateConversations(cfg Config, pool *Pool, rng *rand.Rand) []Request {
	period := float64(cfg.Conversations) / cfg.Rate
	wait := cfg.conversationWait()
	type send struct {
		at        float64
		slot, nth int
	}
	// Each slot sends about Requests/Conversations times in the seed; draw
	// each slot's sends up to a horizon and widen it until the seed's
	// Requests-th send comes before every slot's horizon.
	var sends []send
	horizon := 2 * float64(cfg.Requests) / cfg.Rate
	for {
		sends = sends[:0]
		slotRNG := rand.New(rand.NewPCG(rng.Uint64(), 0x736c6f74))
		for s := range cfg.Conversations {
			t := slotRNG.Float64() * period
			for n := 0; t <= horizon; n++ {
				sends = append(sends, send{at: t, slot: s, nth: n})
				t += wait + cfg.ToolLatency.Draw(slotRNG)
			}
		}
		if len(sends) >= cfg.Requests {
			break
		}
		horizon *= 2
	}
	slices.SortStableFunc(sends, func(a, b send) int {
		return cmp.Or(cmp.Compare(a.at, b.at), a.slot-b.slot)
	})
	convs := map[int]*conversation{}
	out := make([]Request, cfg.Requests)
	for i := range out {
		s := sends[i]
		c := convs[s.slot]
		if c == nil {
			c = newConversation(cfg, pool, s.slot)
			convs[s.slot] = c
		}
		p := c.prompt(cfg, s.slot, s.nth%c.turns)
		out[i] = Request{Index: i, PrefixID: s.slot % pool.Len(), SendAt: time.Duration(s.at * float64(time.Second)),
			Text: p.text, Tokens: p.ids, PrefixTokens: len(pool.tokens[s.slot%pool.Len()]), MaxTokens: p.out, Capped: p.capped}
	}
	return out
}
