package picker

import (
	"strconv"
	"strings"

	"github.com/loadaware/loadaware-epp/scoring"
)

// maxExplained bounds the candidates listed in an explanation (a header must stay small).
const maxExplained = 32

// Explain renders the decision for the x-loadaware-decision response header: the policy,
// the winner and every candidate's matched tokens, in-flight, relative load and score, on
// one line of printable ASCII.
func (d Decision) Explain() string {
	var b strings.Builder
	b.WriteString("policy=" + d.Policy)
	if pol := scoring.Describe(d.Policy); pol != nil && pol.Needs()&scoring.NeedsBeta != 0 {
		b.WriteString(" beta=" + strconv.FormatFloat(d.Beta, 'g', -1, 64))
	}
	if len(d.Endpoints) > 0 {
		b.WriteString(" winner=" + d.Endpoints[0])
	}
	if len(d.Ranked) > 0 {
		b.WriteString(" reason=" + d.Ranked[0].Reason)
	}
	b.WriteString(" prompt_tokens=" + strconv.Itoa(d.PromptTokens) + " tokens=" + d.Tokens)
	if d.Note != "" {
		b.WriteString(" note=" + strconv.Quote(d.Note))
	}
	b.WriteString("; candidates: " + d.candidates(maxExplained))
	return sanitize(b.String())
}

// candidates lists at most limit candidates (0 = all that Ranked holds), best first,
// then how many more were ranked.
func (d Decision) candidates(limit int) string {
	var b strings.Builder
	shown := len(d.Ranked)
	terms := scoring.Describe(d.Policy)
	if limit > 0 {
		shown = min(shown, limit)
	}
	for i, r := range d.Ranked[:shown] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.Addr + " matched=" + strconv.Itoa(r.Matched))
		if src := d.Sources[r.Addr]; src != "" {
			b.WriteString(" source=" + src)
		}
		b.WriteString(" inflight=" + strconv.Itoa(r.InFlight) +
			" rel_load=" + strconv.FormatFloat(r.RelativeLoad, 'f', 3, 64) +
			" score=" + strconv.FormatFloat(r.Score, 'f', 3, 64))
		if te, ok := terms.(scoring.TermsExplainer); ok {
			b.Write(te.AppendTerms(nil, r))
		}
	}
	if more := max(d.Candidates, len(d.Ranked)) - shown; more > 0 {
		b.WriteString(" (+" + strconv.Itoa(more) + " more)")
	}
	return b.String()
}

// sanitize keeps a header value to printable ASCII.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '?'
		}
		return r
	}, s)
}
