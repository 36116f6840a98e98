package workload

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Bursts: the arrival intensity is piecewise constant over periods of
// BurstEvery, BurstFactor times the base rate for the first BurstLen of each
// period and the base rate for the rest, the base rate chosen so that the mean
// stays Rate:
//
//	base = Rate * every / (factor*len + every - len)
//
// Arrivals are the Poisson arrivals at Rate time-warped by the cumulative
// intensity, so a bursty seed sends the same prompts in the same order as the
// same seed without bursts, only at other times.

// bursty reports whether c asks for bursts.
func (c Config) bursty() bool { return c.BurstEvery > 0 }

func (c Config) validateBursts() error {
	if !c.bursty() {
		if c.BurstEvery < 0 {
			return fmt.Errorf("workload: -burst-every %v: use 0 (no bursts) or a positive period", c.BurstEvery)
		}
		return nil
	}
	switch {
	case c.BurstLen <= 0 || c.BurstLen >= c.BurstEvery:
		return fmt.Errorf("workload: -burst-len %v: need a positive length below -burst-every (%v)", c.BurstLen, c.BurstEvery)
	case !(c.BurstFactor >= 1) || math.IsInf(c.BurstFactor, 0):
		return fmt.Errorf("workload: -burst-factor %v: need a finite factor >= 1 (1 = no burst)", c.BurstFactor)
	case c.Profile == ProfileChat:
		return fmt.Errorf("workload: -burst-every %v: bursts apply to the %s and %s profiles, not to %s sessions", c.BurstEvery, ProfileShared, ProfileNovel, ProfileChat)
	}
	return nil
}

// warp maps an arrival time u (seconds) of the Poisson process at Rate to the
// bursty process's: the time at which the bursty cumulative intensity reaches
// Rate*u. Without bursts it returns u.
func (c Config) warp(u float64) float64 {
	if !c.bursty() {
		return u
	}
	every, l := c.BurstEvery.Seconds(), c.BurstLen.Seconds()
	base := c.Rate * every / (c.BurstFactor*l + every - l)
	k := math.Floor(u / every)
	mass := c.Rate * (u - k*every) // intensity mass into the period
	inBurst := c.BurstFactor * base * l
	if mass < inBurst {
		return k*every + mass/(c.BurstFactor*base)
	}
	return k*every + l + (mass-inBurst)/base
}

// Chat sessions (ProfileChat): a session has Turns requests. Turn 1's prompt
// is a system prompt drawn from the pool (Zipf, like a shared prefix) plus a
// user message; turn k's prompt is turn k-1's plus a synthetic assistant
// reply of MaxTokens tokens plus a new user message of UserTokens tokens, so
// the prompts of a session grow turn by turn and each extends the previous.
//
// The load is open loop: turn k+1 is sent a think time (uniform in 0.5-1.5 x
// ThinkTime) after turn k was sent, whatever the latency, so every arm gets
// the same send times (the seeds pair) and the rate does not depend on the
// arm. Sessions arrive Poisson at Rate/Turns per second; the seed observes a
// session population in steady state: sessions that started before the seed
// (as far back as a whole session lasts) send their remaining turns, whose
// prompts carry the history the seed did not see. The seed is its first
// Requests turns in send order, so the request rate is Rate from the start.

func (c Config) validateChat() error {
	switch {
	case c.Turns < 1 || c.Turns > 1000:
		return fmt.Errorf("workload: -turns %d: need 1..1000 turns per session", c.Turns)
	case c.ThinkTime <= 0:
		return fmt.Errorf("workload: -think-time %v: need a positive mean time between a session's turns", c.ThinkTime)
	case c.UserTokens < len(chatTag('U', 0, 0)):
		return fmt.Errorf("workload: -user-tokens %d: need at least %d for the tag", c.UserTokens, len(chatTag('U', 0, 0)))
	}
	return nil
}

// chatTag is "[U-000012-3]" (user message) or "[A-000012-3]" (assistant
// reply) of session s, turn k.
func chatTag(kind byte, s, k int) []piece {
	t := []piece{charPiece('['), charPiece(kind), charPiece('-')}
	t = append(t, digits(fmt.Sprintf("%06d", s%1000000))...)
	t = append(t, charPiece('-'))
	t = append(t, digits(fmt.Sprintf("%d", k))...)
	return append(t, charPiece(']'))
}

// turn is one chat request before it is numbered.
type turn struct {
	at  float64 // send time, seconds from the seed's start
	req Request
}

// generateChat returns a chat seed's requests (see ProfileChat).
func generateChat(cfg Config, pool *Pool, cdf []float64, rng *rand.Rand) []Request {
	sessionRate := cfg.Rate / float64(cfg.Turns)
	think := cfg.ThinkTime.Seconds()
	// A session lasts at most (Turns-1) * 1.5 * ThinkTime: one that starts
	// earlier than that before the seed sends nothing in it.
	t := -float64(cfg.Turns-1) * 1.5 * think
	var turns []turn
	for s := 0; ; s++ {
		t += rng.ExpFloat64() / sessionRate
		if len(turns) >= cfg.Requests && t > kth(turns, cfg.Requests) {
			break // every later session sends after the seed's last request
		}
		turns = append(turns, session(cfg, pool, cdf, rng, s, t, think)...)
	}
	slices.SortStableFunc(turns, func(a, b turn) int {
		return cmp.Compare(a.at, b.at)
	})
	out := make([]Request, cfg.Requests)
	for i := range out {
		out[i] = turns[i].req
		out[i].Index = i
		out[i].SendAt = time.Duration(turns[i].at * float64(time.Second))
	}
	return out
}

// kth returns the k-th earliest send time of turns (k >= 1, len(turns) >= k).
func kth(turns []turn, k int) float64 {
	at := make([]float64, len(turns))
	for i, t := range turns {
		at[i] = t.at
	}
	slices.Sort(at)
	return at[k-1]
}

// session draws session s, starting at start, and returns its turns sent at
// or after the seed's start.
func session(cfg Config, pool *Pool, cdf []float64, rng *rand.Rand, s int, start, think float64) []turn {
	id := zipfDraw(cdf, rng)
	text := pool.texts[id]
	toks := slices.Clone(pool.tokens[id])
	var out []turn
	at := start
	for k := 1; k <= cfg.Turns; k++ {
		if k > 1 {
			at += think * (0.5 + rng.Float64())
			replyText, reply := fill(chatTag('A', s, k-1), cfg.MaxTokens, rng)
			text += "\n" + replyText
			toks = append(append(toks, newlineID), reply...)
		}
		userText, user := fill(chatTag('U', s, k), cfg.UserTokens, rng)
		text += "\n" + userText
		toks = append(append(toks, newlineID), user...)
		if at < 0 {
			continue
		}
		out = append(out, turn{at: at, req: Request{PrefixID: id, Text: text, Tokens: slices.Clone(toks),
			PrefixTokens: len(pool.tokens[id]), MaxTokens: cfg.MaxTokens}})
	}
	return out
}

// zipfDraw returns a prefix id drawn from the popularity cdf.
func zipfDraw(cdf []float64, rng *rand.Rand) int {
	id, _ := slices.BinarySearch(cdf, rng.Float64())
	return min(id, len(cdf)-1)
}
