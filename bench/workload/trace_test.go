package workload

import (
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/trace"
)

func TestFromTraceSharesExactlyTheSharedBlocks(t *testing.T) {
	sel := trace.Selection{Requests: []trace.Request{
		{SendAt: 0, Blocks: []int64{1, 2}, InputTokens: 700, OutputTokens: 9},
		{SendAt: time.Second, Blocks: []int64{1, 3}, InputTokens: 600, OutputTokens: 4},
	}}
	reqs := FromTrace(sel, true)
	if len(reqs) != 2 {
		t.Fatalf("got %d requests", len(reqs))
	}
	a, b := reqs[0], reqs[1]
	if len(a.Tokens) != 700 || len(b.Tokens) != 600 || a.MaxTokens != 9 || b.SendAt != time.Second || b.Index != 1 || a.PrefixID != -1 {
		t.Fatalf("requests %+v / %+v do not follow the selection", a, b)
	}
	common := 0
	for common < len(b.Tokens) && a.Tokens[common] == b.Tokens[common] {
		common++
	}
	if common < trace.BlockTokens || common >= trace.BlockTokens+16 {
		t.Fatalf("the prompts share %d leading tokens; want the first block (%d) and, by chance, hardly more", common, trace.BlockTokens)
	}
	if got := len(strings.Fields(a.Text)); got != len(a.Tokens) {
		t.Fatalf("the text has %d words for %d tokens", got, len(a.Tokens))
	}
	if FromTrace(sel, false)[0].Text != "" {
		t.Fatal("text was built when not asked for")
	}
}
