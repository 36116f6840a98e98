package workload

import (
	"strings"

	"github.com/loadaware/loadaware-epp/bench/trace"
)

// traceTokens draws a trace block's tokens from the filler words, so a
// replayed prompt is text of the synthetic vocabulary like every other
// profile's: one word, one token.
var traceTokens = trace.TokenMap{Base: wordBase, Size: uint32(len(words))}

// FromTrace turns a trace selection into requests in send order: each block id
// becomes its fixed run of trace.BlockTokens filler tokens (equal ids, equal
// runs), the prompt is cut to the request's input tokens and max_tokens is its
// output length. PrefixID is -1 (a trace has no pool). With text, each request
// also carries its prompt as text (one word per token); a virtual-time run
// needs only the ids, and a whole trace's text is large.
func FromTrace(sel trace.Selection, text bool) []Request {
	out := make([]Request, len(sel.Requests))
	for i, q := range sel.Requests {
		r := Request{
			Index:     i,
			PrefixID:  -1,
			SendAt:    q.SendAt,
			Tokens:    traceTokens.AppendTokens(make([]uint32, 0, q.InputTokens), q.Blocks, q.InputTokens),
			MaxTokens: q.OutputTokens,
		}
		if text {
			r.Text = spell(r.Tokens)
		}
		out[i] = r
	}
	return out
}

// spell writes filler-word token ids as text: " word" per id.
func spell(ids []uint32) string {
	var b strings.Builder
	for _, id := range ids {
		b.WriteByte(' ')
		b.WriteString(words[id-wordBase])
	}
	return b.String()
}
