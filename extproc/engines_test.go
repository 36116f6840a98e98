package extproc

import (
	"fmt"
	"testing"

	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/picker"
)

// TestRankAndAdapterRouting drives completions through the server to a picker on a KV
// events index: engine .1 holds the prompt on data-parallel rank 1 for the base model
// and engine .2 under adapter sql with salt s. The answer pins a request to a rank
// (x-data-parallel-rank) only behind a data-parallel endpoint: the one holding its
// prefix, or with nothing held the least loaded (decision 0830); and it routes the
// adapter and salt read from the body to their own blocks.
func TestRankAndAdapterRouting(t *testing.T) {
	ix, err := kvindex.NewIndex(kvindex.IndexConfig{ExtraKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	toks := make([]uint32, 32)
	var ids string
	for i := range toks {
		toks[i] = uint32(i + 1)
		ids += fmt.Sprintf(",%d", i+1)
	}
	ids = ids[1:]
	ix.Apply("10.0.0.1:8000", kvindex.Batch{DPRank: 1, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{1, 2}, Tokens: toks, BlockSize: 16}}})
	ix.Apply("10.0.0.2:8000", kvindex.Batch{DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{1, 2}, Tokens: toks, BlockSize: 16, LoRAName: "sql", Salt: "s"}}})
	tests := []struct {
		name  string
		ranks int
		body  string
		dest  string
		rank  string // the x-data-parallel-rank set; "" none
	}{
		{"the base model goes to rank 1 of .1", 2, `{"model":"qwen","prompt":[` + ids + `]}`, "10.0.0.1:8000", "1"},
		{"no ranks behind the endpoint: no pin", 1, `{"model":"qwen","prompt":[` + ids + `]}`, "10.0.0.1:8000", ""},
		{"the adapter with its salt goes to .2, rank 0", 2, `{"model":"sql","cache_salt":"s","prompt":[` + ids + `]}`, "10.0.0.2:8000", "0"},
		{"the adapter without the salt matches nothing: the least loaded rank", 2, `{"model":"sql","prompt":[` + ids + `]}`, "10.0.0.1:8000", "0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, policy: "kvaware",
				cache: picker.KVEventsView{Index: ix, Ranks: tc.ranks}, base: []string{"qwen"}})
			st, _ := h.open(t)
			if err := st.Send(postHeaders(PathCompletions)); err != nil {
				t.Fatal(err)
			}
			if err := st.Send(body(tc.body, true)); err != nil {
				t.Fatal(err)
			}
			r, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, o := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				got[o.GetHeader().GetKey()] = string(o.GetHeader().GetRawValue())
			}
			if got[DestinationHeader] != tc.dest {
				t.Errorf("destination %q, want %q", got[DestinationHeader], tc.dest)
			}
			if rank, set := got[RankHeader]; rank != tc.rank || set != (tc.rank != "") {
				t.Errorf("%s = %q (set %v), want %q", RankHeader, rank, set, tc.rank)
			}
		})
	}
}
