package trace

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// OverLong is the rule for a request whose prompt and completion do not fit
// the engines' context (vLLM refuses such a request with a 400).
type OverLong int

const (
	// Cap keeps the head of the prompt, cut so that prompt + completion fill
	// the context exactly: shared prefixes stay shared, the tail is lost. A
	// request whose completion alone fills the context is dropped.
	Cap OverLong = iota
	// Drop leaves the request out of the run.
	Drop
)

// Window is a span of a trace's own clock: From inclusive, To exclusive; To 0
// means to the end.
type Window struct {
	From, To time.Duration
}

// Options selects and scales a trace's requests.
type Options struct {
	Window
	Speedup     float64  // divides the trace's clock: 2 sends twice as fast; must be > 0
	MaxRequests int      // at most this many requests (after the window), 0: all
	Context     int      // the engines' context in tokens (prompt + completion); 0: no limit
	OverLong    OverLong // what to do with a request that does not fit Context
}

// Request is one selected request, ready to be materialized and sent.
type Request struct {
	Line             int           // the trace's line
	SendAt           time.Duration // from the run's start: (arrival - From) / Speedup
	Blocks           []int64       // the blocks its (possibly capped) prompt spans
	InputTokens      int           // prompt tokens sent (after a cap)
	OutputTokens     int           // completion tokens asked for
	TraceInputTokens int           // prompt tokens in the trace
}

// Selection is what Select chose and what it had to change.
type Selection struct {
	Requests []Request
	Capped   int // prompts cut to fit the context (OverLong Cap)
	Dropped  int // requests left out for not fitting the context
}

// Select returns the records inside the window, in order, with their send
// times scaled by the speed-up and counted from the window's start, at most
// MaxRequests of them, each fitted to Context by the OverLong rule (counted in
// the selection, never silently). An empty selection is an error naming the
// window.
func Select(recs []Record, o Options) (Selection, error) {
	switch {
	case !(o.Speedup > 0) || math.IsInf(o.Speedup, 0):
		return Selection{}, fmt.Errorf("trace: speed-up %v: pass a positive number (1 replays at the recorded pace)", o.Speedup)
	case o.From < 0 || (o.To != 0 && o.To <= o.From):
		return Selection{}, fmt.Errorf("trace: window [%v, %v): pass 0 <= from < to (to 0 runs to the end)", o.From, o.To)
	case o.MaxRequests < 0:
		return Selection{}, fmt.Errorf("trace: request cap %d: pass 0 (all) or more", o.MaxRequests)
	case o.Context < 0:
		return Selection{}, fmt.Errorf("trace: context %d tokens: pass 0 (no limit) or the engines' context", o.Context)
	}
	var sel Selection
	for _, r := range recs {
		if r.At < o.From || (o.To != 0 && r.At >= o.To) {
			continue
		}
		if o.MaxRequests > 0 && len(sel.Requests) == o.MaxRequests {
			break
		}
		q := Request{
			Line:             r.Line,
			SendAt:           time.Duration(float64(r.At-o.From) / o.Speedup),
			Blocks:           r.Blocks,
			InputTokens:      r.InputTokens,
			OutputTokens:     r.OutputTokens,
			TraceInputTokens: r.InputTokens,
		}
		if o.Context > 0 && q.InputTokens+q.OutputTokens > o.Context {
			room := o.Context - q.OutputTokens
			if o.OverLong == Drop || room < 1 {
				sel.Dropped++
				continue
			}
			q.InputTokens = room
			q.Blocks = q.Blocks[:(room+BlockTokens-1)/BlockTokens]
			sel.Capped++
		}
		sel.Requests = append(sel.Requests, q)
	}
	if len(sel.Requests) == 0 {
		return sel, fmt.Errorf("trace: no request in the window [%v, %v) fits (%d dropped as longer than the context): widen the window or check -from/-to", o.From, o.To, sel.Dropped)
	}
	return sel, nil
}

// Windows cuts the span of the trace's arrivals into n consecutive windows of
// equal length, the last one closed at the final arrival; each is a paired
// sample of the same trace.
func Windows(recs []Record, n int) ([]Window, error) {
	if n < 1 {
		return nil, fmt.Errorf("trace: %d windows: pass 1 or more", n)
	}
	if len(recs) == 0 {
		return nil, errors.New("trace: no requests to cut into windows")
	}
	first, last := recs[0].At, recs[len(recs)-1].At
	span := last - first + 1
	if span < time.Duration(n) {
		return nil, fmt.Errorf("trace: %d windows over a span of %v: pass fewer windows", n, span)
	}
	out := make([]Window, n)
	for i := range out {
		out[i] = Window{From: first + span*time.Duration(i)/time.Duration(n), To: first + span*time.Duration(i+1)/time.Duration(n)}
	}
	return out, nil
}

// Reuse is how much of a set of prompts an unbounded prefix cache could
// serve, the ceiling any router's hit rate is measured against.
type Reuse struct {
	Tokens         int64 // prompt tokens sent
	Reusable       int64 // of them, the ones in a prefix an earlier prompt already had
	Blocks         int64 // whole blocks sent
	ReusableBlocks int64 // whole blocks whose prefix an earlier prompt sent whole
}

// Fraction is Reusable / Tokens.
func (r Reuse) Fraction() float64 {
	if r.Tokens == 0 {
		return 0
	}
	return float64(r.Reusable) / float64(r.Tokens)
}

// ReuseCeiling computes the reuse of the requests in order, with an unbounded
// cache and no eviction. A block id stands for its whole prefix, so a
// request's reusable part is its leading run of blocks seen before: a block
// counts in full if an earlier prompt held as much of it, in part (up to what
// was held) otherwise, and the run ends there.
func ReuseCeiling(reqs []Request) Reuse {
	held := make(map[int64]int) // block id -> most of it any prompt held
	var u Reuse
	for _, q := range reqs {
		u.Tokens += int64(q.InputTokens)
		open := true
		for j, id := range q.Blocks {
			n := min(BlockTokens, q.InputTokens-j*BlockTokens)
			if n == BlockTokens {
				u.Blocks++
			}
			if open {
				h := held[id]
				u.Reusable += int64(min(h, n))
				if h == BlockTokens && n == BlockTokens {
					u.ReusableBlocks++
				}
				open = h >= n
			}
			if n > held[id] {
				held[id] = n
			}
		}
	}
	return u
}

// TokenMap turns a block id into its fixed run of BlockTokens token ids, drawn
// from [Base, Base+Size).
type TokenMap struct {
	Base, Size uint32
}

// AppendTokens appends the first n token ids of the prompt made of blocks to
// dst: block by block, each block's run cut where n ends.
func (m TokenMap) AppendTokens(dst []uint32, blocks []int64, n int) []uint32 {
	for _, id := range blocks {
		k := min(BlockTokens, n)
		for i := range k {
			dst = append(dst, m.Base+uint32(mix(uint64(id)<<9|uint64(i))%uint64(m.Size)))
		}
		n -= k
		if n == 0 {
			break
		}
	}
	return dst
}

// mix is splitmix64's finalizer: a bijection of 64 bits, so different
// (block, position) pairs draw independently.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
