package picker

import (
	"sync"

	"github.com/loadaware/loadaware-epp/fleet"
)

// ledgerBlock is the KV block size, in tokens, the ledger counts in: vLLM's default, which
// Dynamo's router takes from the engine.
const ledgerBlock = 16

// ledger is the router-side account of the requests this picker has in flight on each
// endpoint, with their sizes: what Dynamo's router keeps per worker (ActiveSequences: the
// distinct KV blocks of its active requests, a block shared by several counted once, and
// the uncached prompt tokens of those not yet prefilled) and what llm-d's
// inflight-load-producer keeps (uncached prompt tokens until the first response chunk).
// It is filled only for the policies that read it (scoring.NeedsInFlightSizes).
type ledger struct {
	mu  sync.Mutex
	eps map[string]*account
}

// account is one endpoint's part of the ledger.
type account struct {
	blocks  map[uint64]int // block hash -> requests in flight that hold it
	prefill int            // uncached prompt tokens of requests not yet past their first token
}

// ledgerEntry is one request in the ledger; it hears its booking's first token and end
// (fleet.Hook).
type ledgerEntry struct {
	l         *ledger
	a         *account // its endpoint's account (an orphan once forgotten)
	hashes    []uint64
	uncached  int
	prefilled bool // guarded by l.mu
	ended     bool // guarded by l.mu
}

func newLedger() *ledger { return &ledger{eps: make(map[string]*account)} }

// blockHashes returns the chained hashes of the prompt's full ledgerBlock-token blocks
// (a partial last block is not a shared KV block).
func blockHashes(tokens []uint32) []uint64 {
	out := make([]uint64, 0, len(tokens)/ledgerBlock)
	h := uint64(14695981039346656037)
	for i := 0; i+ledgerBlock <= len(tokens); i += ledgerBlock {
		for _, t := range tokens[i : i+ledgerBlock] {
			h ^= uint64(t)
			h *= 1099511628211
		}
		out = append(out, h)
	}
	return out
}

// view returns addr's uncached prompt tokens awaiting a first token, its distinct active
// blocks, and how many of hashes are not among them.
func (l *ledger) view(addr string, hashes []uint64) (prefill, active, fresh int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.eps[addr]
	if a == nil {
		return 0, 0, len(hashes)
	}
	for _, h := range hashes {
		if a.blocks[h] == 0 {
			fresh++
		}
	}
	return a.prefill, len(a.blocks), fresh
}

// add records a request booked on addr with its prompt's block hashes and its uncached
// prompt tokens, and returns the entry that removes it again (as the booking's hook).
func (l *ledger) add(addr string, hashes []uint64, uncached int) *ledgerEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.eps[addr]
	if a == nil {
		a = &account{blocks: make(map[uint64]int)}
		l.eps[addr] = a
	}
	for _, h := range hashes {
		a.blocks[h]++
	}
	a.prefill += uncached
	return &ledgerEntry{l: l, a: a, hashes: hashes, uncached: uncached}
}

// forget drops the accounts of endpoints not in keep (their entries end in the orphaned
// accounts).
func (l *ledger) forget(keep []string) {
	in := make(map[string]bool, len(keep))
	for _, a := range keep {
		in[a] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for a := range l.eps {
		if !in[a] {
			delete(l.eps, a)
		}
	}
}

var _ fleet.Hook = (*ledgerEntry)(nil)

// Decoding implements fleet.Hook: the request's prefill is done.
func (e *ledgerEntry) Decoding() {
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if e.prefilled || e.ended {
		return
	}
	e.prefilled = true
	e.a.prefill -= e.uncached
}

// Released implements fleet.Hook: the request left its endpoint.
func (e *ledgerEntry) Released() {
	e.l.mu.Lock()
	defer e.l.mu.Unlock()
	if e.ended {
		return
	}
	e.ended = true
	a := e.a
	if !e.prefilled {
		a.prefill -= e.uncached
	}
	for _, h := range e.hashes {
		if a.blocks[h]--; a.blocks[h] <= 0 {
			delete(a.blocks, h)
		}
	}
}
