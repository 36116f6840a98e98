package kvindex

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// IndexConfig configures an Index.
type IndexConfig struct {
	Credits Credits // zero value: DefaultCredits
	// Seed keys the index's block hash; 0: a random seed (prompts cannot be crafted to
	// collide with another tenant's blocks).
	Seed uint64
	// Remote is what to do with blocks whose locality is REMOTE (zero: RemoteRefuse).
	Remote RemotePolicy
	// ExtraKeys indexes blocks that carry a LoRA adapter's name or a cache_salt under a
	// key of their own (matched only by lookups that give the same adapter and salt, see
	// Key) instead of refusing them. Blocks with other extra keys (multimodal items,
	// prompt embeddings) are refused either way: a router cannot compute them.
	ExtraKeys bool
	// MaxBlocks bounds the blocks each stream (an endpoint's data-parallel rank) holds;
	// over it the stream's least recently stored blocks are dropped (budget.go). 0 means
	// DefaultMaxBlocks; negative means no bound.
	MaxBlocks  int
	Registerer prometheus.Registerer // nil: metrics not registered
}

// Index records which endpoint holds which token blocks, from applied batches, and
// answers the contiguous cached prefix of a prompt per endpoint. It is safe for
// concurrent use. Events are applied one writer at a time; lookups take no lock and run
// in parallel with each other and with the writer (see Match for what they see).
//
// Layout (docs/decisions/0802): every stream (an endpoint's data-parallel rank) has a
// slot; for each tier, one table maps (block key, slot word) to the bitmask of the
// slots of that word holding the block, so a lookup costs one probe per prompt block
// and tier for up to 64 streams. Each stream maps engine hashes to block keys (for
// BlockRemoved and parent links), and the first block of each chain keeps its store
// order (for HolderRank).
type Index struct {
	credit [numMedia]float64
	order  []Medium // credited tiers, best credit first
	// root keys the block hash (the key space): fixed once the index has had a stream
	// (AdoptKeySpace may change it before), read atomically by lookups.
	root   atomic.Uint64
	remote RemotePolicy
	extras bool
	m      *indexMetrics
	// maxBlocks is the blocks a stream may hold; 0: no bound (budget.go).
	maxBlocks int

	held   [numMedia]ctable // wordKey(block key, slot/64) -> bitmask of slots holding it
	stamps ctable           // pair(first block key, stream salt) -> store order
	dir    atomic.Pointer[directory]
	last   atomic.Pointer[resolution] // see groupsFor

	// What follows is the writers' (lookups read the fields above, and take mu only to
	// ask again; see Match).
	_       linePad
	mu      rwspin
	batchMu sync.RWMutex // read-held over a batch, so that ExportStream sees whole batches
	streams map[streamID]*stream
	byEP    map[string][]*stream
	free    []int // released slots
	slots   int   // slots handed out
	stamp   uint64
	salt    uint64
	owners  map[string]uint64 // ownership -> its bit in holder sets (owners.go)

	sink atomic.Uint64 // what warm read, kept so that its loads are not removed
}

// wordKey is the key of (block key, slot word) in the tier tables.
func wordKey(key, word uint64) uint64 { return key ^ word*0x9e3779b97f4a7c15 }

// NewIndex returns an empty index.
func NewIndex(cfg IndexConfig) (*Index, error) {
	if cfg.Credits == (Credits{}) {
		cfg.Credits = DefaultCredits()
	}
	ix := &Index{
		remote:  cfg.Remote,
		extras:  cfg.ExtraKeys,
		streams: map[streamID]*stream{},
		byEP:    map[string][]*stream{},
	}
	switch {
	case cfg.MaxBlocks == 0:
		ix.maxBlocks = DefaultMaxBlocks
	case cfg.MaxBlocks > 0:
		ix.maxBlocks = cfg.MaxBlocks
	}
	for m := range numMedia {
		c := cfg.Credits.of(m)
		if !(c >= 0 && c <= 1) {
			return nil, fmt.Errorf("kvindex: %s credit %v: use a fraction in [0,1]", m, c)
		}
		ix.credit[m] = c
		if c > 0 {
			ix.order = append(ix.order, m)
		}
	}
	slices.SortStableFunc(ix.order, func(a, b Medium) int { return cmpF(ix.credit[b], ix.credit[a]) })
	root := cfg.Seed
	if root == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		root = binary.LittleEndian.Uint64(b[:]) | 1
	}
	ix.root.Store(root)
	ix.salt = fmix(root + 0x632be59bd9b4e019)
	ix.dir.Store(&directory{byEP: map[string][]streamRef{}})
	for m := range ix.held {
		ix.held[m].mixed = true // wordKey of a chain key, an fmix output
	}
	ix.stamps.mixed = true // pair: an fmix output
	var err error
	if ix.m, err = newIndexMetrics(cfg.Registerer, ix); err != nil {
		return nil, err
	}
	return ix, nil
}

func cmpF(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Blocks returns the number of (block, endpoint rank) entries held.
func (ix *Index) Blocks() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	n := 0
	for _, s := range ix.streams {
		n += s.engine.Len()
	}
	return n
}
