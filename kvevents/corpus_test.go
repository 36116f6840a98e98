package kvevents

import (
	"bufio"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/loadaware/loadaware-epp/kvindex"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/vllm-corpus.txt from the release table")

const corpusFile = "testdata/vllm-corpus.txt"

// release is the KV events wire layout of one vLLM minor release: which fields
// BlockStored and BlockRemoved declare and in which form events travel. Each step names
// the PR that made it; the release it first shipped in is inferred from the PR's merge
// date and peers' statements (see corpusHeader).
type release struct {
	minor int // v0.<minor>
}

func (r release) name() string { return fmt.Sprintf("v0.%d", r.minor) }

func (r release) has(since int) bool { return r.minor >= since }

// The first release of each change.
const (
	sinceDPRank    = 9  // data_parallel_rank in the batch (vllm#18925)
	sinceMedium    = 10 // medium in BlockStored and BlockRemoved (vllm#19737)
	sinceLoRAName  = 12 // lora_name (vllm#27577)
	sinceBytes     = 12 // bytes hashes under VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 (dynamo#3180, v0.10.2 on)
	sinceExtraKeys = 16 // extra_keys (vllm#33304)
	sinceGroup     = 19 // group_idx (vllm#37688)
	sinceSpec      = 21 // kv_cache_spec_kind and _sliding_window (vllm#40984)
	sinceMapEvents = 24 // events as maps (vllm#42892; dynamo#10660: arrays through v0.23)
	sinceLocality  = 26 // locality, and the FS and OBJ media (vllm#48281, #47923; dynamo#11571: v0.26.0)
	sinceStorage   = 27 // STORAGE replaces FS and OBJ (vllm#48123; dynamo#11571: v0.27+)
	sinceOwnership = 28 // ownership (vllm#52067)
)

func (r release) layout() Layout {
	l := Layout{NoDPRank: !r.has(sinceDPRank), MapEvents: r.has(sinceMapEvents), BytesHashes: r.has(sinceBytes) && r.minor%2 == 1}
	l.StoredFields, l.RemovedFields = 5, 1
	for _, step := range []struct{ since, stored, removed int }{
		{sinceMedium, 6, 2}, {sinceLoRAName, 7, 2}, {sinceExtraKeys, 8, 2}, {sinceGroup, 9, 3},
		{sinceSpec, 11, 3}, {sinceLocality, 12, 4}, {sinceOwnership, 13, 5},
	} {
		if r.has(step.since) {
			l.StoredFields, l.RemovedFields = step.stored, step.removed
		}
	}
	return l
}

// batch is what the release's engine publishes in one step, with every field it
// declares in use: a chain stored in two events, a LoRA block, a salted block, an
// offloaded copy, a removal, and a reset.
func (r release) batch() kvindex.Batch {
	toks := func(from uint32) []uint32 {
		t := make([]uint32, 8)
		for i := range t {
			t[i] = from + uint32(i)
		}
		return t
	}
	b := kvindex.Batch{TS: 1.7e9 + float64(r.minor), DPRank: -1}
	if r.has(sinceDPRank) {
		b.DPRank = r.minor % 3
	}
	gpu := ""
	if r.has(sinceMedium) {
		gpu = "GPU"
	}
	first := kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{1001, 1002}, Tokens: toks(100), BlockSize: 4, Medium: gpu}
	next := kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{1003, 1 << 63}, Parent: 1002, HasParent: true, Tokens: toks(108), BlockSize: 4, Medium: gpu}
	lora := kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{2001, 2002}, Tokens: toks(100), BlockSize: 4, LoRAID: 1, Medium: gpu}
	if r.has(sinceLoRAName) {
		lora.LoRAName = "sql-adapter"
	}
	b.Events = append(b.Events, first, next, lora)
	if r.has(sinceExtraKeys) {
		b.Events = append(b.Events, kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{3001, 3002}, Tokens: toks(100), BlockSize: 4, Medium: gpu, Salt: "tenant-7"})
	}
	if r.has(sinceSpec) {
		b.Events = append(b.Events, kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{4001}, Tokens: toks(500)[:4], BlockSize: 4, Medium: gpu, Group: 1, SpecKind: "sliding_window", SlidingWindow: 4096})
	}
	if r.has(sinceMedium) {
		// An offloaded copy without tokens (the offloading connector's tier update).
		cpu := kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{1001, 1002}, BlockSize: 4, Medium: "CPU"}
		b.Events = append(b.Events, cpu)
	}
	if r.has(sinceLocality) {
		storage := "FS"
		if r.has(sinceStorage) {
			storage = "STORAGE"
		}
		local := kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{1001}, BlockSize: 4, Medium: storage, Locality: "LOCAL"}
		remote := kvindex.Event{Kind: kvindex.BlockStored, Hashes: []uint64{1001, 1002}, BlockSize: 4, Medium: storage, Locality: "REMOTE"}
		if r.has(sinceOwnership) {
			remote.Ownership = "shared-fs"
		}
		b.Events = append(b.Events, local, remote)
	}
	removed := kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: []uint64{1 << 63}, Medium: gpu}
	if r.has(sinceGroup) {
		b.Events = append(b.Events, kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: []uint64{4001}, Medium: gpu, Group: 1})
	}
	b.Events = append(b.Events, removed)
	if r.has(sinceLocality) {
		b.Events = append(b.Events, kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: []uint64{1002}, Medium: "STORAGE", Locality: "REMOTE"})
	}
	b.Events = append(b.Events, kvindex.Event{Kind: kvindex.AllBlocksCleared})
	return b
}

var releases = func() []release {
	var rs []release
	for m := 8; m <= 29; m++ {
		rs = append(rs, release{m})
	}
	return rs
}()

const corpusHeader = `# vLLM KV event batches, one per minor release v0.8-v0.29: "<release> <payload hex>".
# Written by kvevents.Encode from the release table in corpus_test.go (go test
# ./kvevents -run Corpus -update-corpus); the layout of each release is derived from
# vllm-project/vllm vllm/distributed/kv_events.py (Apache-2.0) and the PRs that changed
# it: #16750, #18925, #19737, #27577, #33304, #37688, #40984, #42892, #47923, #48281,
# #48123, #52067. Release boundaries are inferred from those PRs' merge dates and from
# ai-dynamo/dynamo#10660, #11571 and #3180 (the vLLM repository was not fetched whole:
# over the snapshot size limit).
`

// TestCorpusDecodesEveryRelease decodes each release's frame in the corpus to the batch
// the release table describes, and checks the encoder still writes the same bytes.
func TestCorpusDecodesEveryRelease(t *testing.T) {
	if *updateCorpus {
		var b strings.Builder
		b.WriteString(corpusHeader)
		for _, r := range releases {
			fmt.Fprintf(&b, "%s %s\n", r.name(), hex.EncodeToString(Encode(r.batch(), r.layout())))
		}
		if err := os.WriteFile(corpusFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	frames := readCorpus(t)
	for _, r := range releases {
		t.Run(r.name(), func(t *testing.T) {
			payload, ok := frames[r.name()]
			if !ok {
				t.Fatalf("no frame for %s in %s", r.name(), corpusFile)
			}
			got, err := Decode(payload)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(r.batch(), got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Decode (-want +got):\n%s", diff)
			}
			if enc := Encode(r.batch(), r.layout()); string(enc) != string(payload) {
				t.Errorf("Encode writes %x, the corpus holds %x (rerun with -update-corpus if the layout changed on purpose)", enc, payload)
			}
		})
	}
}

// TestCorpusMediaAndLocality applies every release's stores (its removals of REMOTE
// copies and its reset left out), evicts the chain's first two blocks from the GPU, and
// checks what is still credited: STORAGE (and v0.26's FS) copies at the storage credit,
// REMOTE copies only when the policy credits them, CPU copies not at all (credit 0).
func TestCorpusMediaAndLocality(t *testing.T) {
	prompt := make([]uint32, 64)
	for i := range prompt {
		prompt[i] = uint32(100 + i)
	}
	for _, r := range releases {
		for _, policy := range []kvindex.RemotePolicy{kvindex.RemoteRefuse, kvindex.RemoteCredit} {
			t.Run(fmt.Sprintf("%s/%s", r.name(), policy), func(t *testing.T) {
				ix, err := kvindex.NewIndex(kvindex.IndexConfig{Credits: kvindex.Credits{GPU: 1, Storage: 0.5}, Remote: policy, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				b := r.batch()
				b.Events = slices.DeleteFunc(b.Events, func(ev kvindex.Event) bool {
					return ev.Kind == kvindex.AllBlocksCleared || ev.Kind == kvindex.BlockRemoved && ev.Locality == "REMOTE"
				})
				// Evict the GPU copies of the first two blocks: what is left of them is
				// what the other tiers hold.
				b.Events = append(b.Events, kvindex.Event{Kind: kvindex.BlockRemoved, Hashes: []uint64{1001, 1002}, Medium: b.Events[0].Medium})
				ix.Apply("e", b)
				got := ix.Match(prompt, []string{"e"})[0].Matched
				want := 0 // no GPU copy of block 0 left, and no storage tier yet
				switch {
				case !r.has(sinceLocality):
				case policy == kvindex.RemoteCredit:
					// Blocks 0 and 1 in (remote) storage at half of 4 tokens each, then
					// block 2 still on the GPU.
					want = 2 + 2 + 4
				default:
					want = 2 // block 0's LOCAL copy; the REMOTE copies are refused
				}
				if got != want {
					t.Errorf("matched %d tokens, want %d", got, want)
				}
			})
		}
	}
}

func readCorpus(t *testing.T) map[string][]byte {
	t.Helper()
	f, err := os.Open(corpusFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, h, ok := strings.Cut(line, " ")
		b, err := hex.DecodeString(h)
		if !ok || err != nil {
			t.Fatalf("%s: line %q is not \"<release> <hex>\"", corpusFile, line)
		}
		out[name] = b
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
