package workload

import "fmt"

// The synthetic vocabulary. Ids of single characters follow the byte-level
// layout of GPT-2-style vocabularies (printable byte b -> b-33) so tags look
// like real token ids; words take ids from wordBase on. Only equality of ids
// matters to the cache: the ids are not claimed to be Qwen2.5's.
const (
	newlineID   = 198 // "\n"
	wordBase    = 10000
	prefixID    = 9000 // the word "PREFIX" in a tag
	novelID     = 9001 // the word "NOVEL" in a tag
	warmupID    = 9002 // the word "WARMUP" in a warm-up tag
	summarizeID = 9003 // " summarize" in a warm-up prompt
)

func charPiece(c byte) piece { return piece{text: string(c), id: uint32(c) - 33} }

func digits(s string) []piece {
	out := make([]piece, len(s))
	for i := range len(s) {
		out[i] = charPiece(s[i])
	}
	return out
}

// prefixTag is "[PREFIX-007]": '[', PREFIX, '-', three digits, ']'.
func prefixTag(i int) []piece {
	t := []piece{charPiece('['), {"PREFIX", prefixID}, charPiece('-')}
	t = append(t, digits(fmt.Sprintf("%03d", i))...)
	return append(t, charPiece(']'))
}

// suffixTag is "[Q-000123]".
func suffixTag(i int) []piece {
	t := []piece{charPiece('['), charPiece('Q'), charPiece('-')}
	t = append(t, digits(fmt.Sprintf("%06d", i%1000000))...)
	return append(t, charPiece(']'))
}

// novelTag is "[NOVEL-<seed>-<index>]", unique per seed and request.
func novelTag(seed uint64, i int) []piece {
	t := []piece{charPiece('['), {"NOVEL", novelID}, charPiece('-')}
	t = append(t, digits(fmt.Sprintf("%d", seed))...)
	t = append(t, charPiece('-'))
	t = append(t, digits(fmt.Sprintf("%06d", i))...)
	return append(t, charPiece(']'))
}

// words is the filler list; each is one token (with its leading space) in the
// synthetic vocabulary.
var words = []string{
	"the", "of", "and", "to", "in", "is", "that", "for", "it", "as",
	"with", "was", "on", "be", "by", "this", "are", "from", "or", "at",
	"an", "which", "have", "not", "has", "but", "were", "its", "can", "all",
	"system", "model", "cache", "server", "request", "token", "memory", "layer", "value", "queue",
	"policy", "engine", "cluster", "prefix", "batch", "time", "load", "route", "store", "block",
	"data", "result", "table", "report", "signal", "window", "vector", "index", "number", "level",
	"network", "process", "service", "answer", "question", "document", "section", "example", "method", "record",
	"simple", "large", "small", "early", "later", "other", "first", "last", "same", "each",
	"read", "write", "send", "keep", "move", "hold", "find", "show", "make", "take",
	"under", "over", "after", "before", "between", "within", "without", "during", "about", "across",
	"green", "river", "stone", "north", "light", "paper", "market", "garden", "winter", "harbor",
	"bridge", "forest", "meter", "copper", "silver", "rocket", "valley", "orange", "castle", "planet",
	"lantern", "meadow", "compass", "journal", "quartz", "falcon", "harvest", "ember",
}
