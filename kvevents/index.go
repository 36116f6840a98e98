package kvevents

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Medium is a cache tier named by an event's medium field.
type Medium uint8

// The tiers the index credits. A block may be held in several at once.
const (
	GPU Medium = iota
	CPU
	Disk
	numMedia
)

// ParseMedium maps an event's medium to a tier: "" (None, vLLM before #19737) and "GPU"
// are GPU; "CPU" and LMCache's "cpu"/"LocalCPUBackend" are CPU; names containing "disk"
// are Disk. ok is false for anything else.
func ParseMedium(s string) (m Medium, ok bool) {
	l := strings.ToLower(s)
	switch {
	case l == "" || l == "gpu" || l == "cuda":
		return GPU, true
	case l == "cpu" || strings.Contains(l, "cpubackend"):
		return CPU, true
	case strings.Contains(l, "disk"):
		return Disk, true
	}
	return 0, false
}

// Credits is the fraction of a block's tokens credited when an endpoint holds it in a
// tier (its best tier counts). A tier with credit 0 also ends the contiguous prefix.
type Credits struct{ GPU, CPU, Disk float64 }

// DefaultCredits credits GPU and CPU blocks fully (the LMCache source credits its CPU
// tier fully too) and disk blocks at half (see docs/decisions/0801).
func DefaultCredits() Credits { return Credits{GPU: 1, CPU: 1, Disk: 0.5} }

// ParseCredits parses "GPU=1,CPU=1,DISK=0.5" (any subset; the rest keep their defaults).
func ParseCredits(s string) (Credits, error) {
	c := DefaultCredits()
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		var f float64
		if ok {
			_, err := fmt.Sscanf(val, "%g", &f)
			ok = err == nil && f >= 0 && f <= 1
		}
		m, known := ParseMedium(name)
		if !ok || !known {
			return c, fmt.Errorf("kvevents: medium credit %q: use TIER=FRACTION with TIER one of GPU, CPU, DISK and FRACTION in [0,1], e.g. GPU=1,CPU=1,DISK=0.5", kv)
		}
		switch m {
		case GPU:
			c.GPU = f
		case CPU:
			c.CPU = f
		case Disk:
			c.Disk = f
		}
	}
	return c, nil
}

// IndexConfig configures an Index.
type IndexConfig struct {
	Credits Credits // zero value: DefaultCredits
	// Seed keys the index's block hash; 0: a random seed (prompts cannot be crafted to
	// collide with another tenant's blocks).
	Seed       uint64
	Registerer prometheus.Registerer // nil: metrics not registered
}

// Index records which endpoint holds which token blocks, from applied batches, and
// answers the contiguous cached prefix of a prompt per endpoint. It is safe for
// concurrent use; lookups run in parallel with each other and between events.
type Index struct {
	credit [numMedia]float64
	root   uint64
	m      *indexMetrics

	mu      sync.RWMutex
	entries map[uint64]uint64 // pair(block key, stream salt) -> stamp<<8 | tier bits
	streams map[streamID]*stream
	byEP    map[string][]*stream
	sizes   map[int]int // block size -> streams using it
	stamp   uint64
	salt    uint64
}

type streamID struct {
	endpoint string
	rank     int
}

// stream is one publisher's view: an endpoint's data-parallel rank.
type stream struct {
	id        streamID
	salt      uint64
	blockSize int
	engine    map[uint64]uint64 // engine block hash -> block key
}

// NewIndex returns an empty index.
func NewIndex(cfg IndexConfig) (*Index, error) {
	if cfg.Credits == (Credits{}) {
		cfg.Credits = DefaultCredits()
	}
	for _, c := range []float64{cfg.Credits.GPU, cfg.Credits.CPU, cfg.Credits.Disk} {
		if !(c >= 0 && c <= 1) {
			return nil, fmt.Errorf("kvevents: medium credit %v: use a fraction in [0,1]", c)
		}
	}
	ix := &Index{
		credit:  [numMedia]float64{cfg.Credits.GPU, cfg.Credits.CPU, cfg.Credits.Disk},
		root:    cfg.Seed,
		entries: map[uint64]uint64{},
		streams: map[streamID]*stream{},
		byEP:    map[string][]*stream{},
		sizes:   map[int]int{},
	}
	if ix.root == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		ix.root = binary.LittleEndian.Uint64(b[:]) | 1
	}
	ix.salt = fmix(ix.root + 0x632be59bd9b4e019)
	var err error
	if ix.m, err = newIndexMetrics(cfg.Registerer, ix); err != nil {
		return nil, err
	}
	return ix, nil
}

// Blocks returns the number of (block, endpoint rank) entries held.
func (ix *Index) Blocks() int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.entries)
}

// The outcomes of one block in Apply (they label loadaware_kvevents_blocks_total).
const (
	OutStored         = "stored"
	OutTierAdded      = "tier_added"
	OutRemoved        = "removed"
	OutRemovedUnknown = "removed_unknown"
	OutLoRA           = "refused_lora"
	OutExtraKeys      = "refused_extra_keys"
	OutGroup          = "refused_hma_group"
	OutSpecKind       = "refused_spec_kind"
	OutUnknownParent  = "refused_unknown_parent"
	OutUnknownMedium  = "refused_unknown_medium"
	OutNonDense       = "refused_non_dense"
	OutUnknownBlock   = "refused_unknown_block"
)

// Apply applies the events of one batch published by endpoint (the batch's
// DPRank names the stream). Each block's outcome is counted in the metrics; refused
// blocks are left out of the index, so an endpoint is never credited for a block it may
// not hold.
func (ix *Index) Apply(endpoint string, b Batch) {
	id := streamID{endpoint, b.DPRank}
	for i := range b.Events {
		ix.applyEvent(id, &b.Events[i])
	}
}

func (ix *Index) applyEvent(id streamID, ev *Event) {
	ix.m.events.WithLabelValues(ev.Kind.String()).Inc()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	switch ev.Kind {
	case AllBlocksCleared:
		if s := ix.streams[id]; s != nil {
			ix.m.dropped.WithLabelValues("cleared").Add(float64(ix.clear(s)))
		}
	case BlockRemoved:
		s := ix.streams[id]
		med, ok := ParseMedium(ev.Medium)
		if !ok {
			ix.m.count(OutUnknownMedium, len(ev.Hashes))
			return
		}
		for _, h := range ev.Hashes {
			key, held := uint64(0), false
			if s != nil {
				key, held = s.engine[h]
			}
			if !held {
				ix.m.count(OutRemovedUnknown, 1)
				continue
			}
			pk := pair(key, s.salt)
			v := ix.entries[pk] &^ (1 << med)
			if v&0xff == 0 {
				delete(ix.entries, pk)
				delete(s.engine, h)
			} else {
				ix.entries[pk] = v
			}
			ix.m.count(OutRemoved, 1)
		}
	case BlockStored:
		ix.store(id, ev)
	}
}

func (ix *Index) store(id streamID, ev *Event) {
	n := len(ev.Hashes)
	refuse := func(out string) { ix.m.count(out, n) }
	med, ok := ParseMedium(ev.Medium)
	switch {
	case !ok:
		refuse(OutUnknownMedium)
		return
	case ev.LoRAName != "" || ev.LoRAID != 0:
		refuse(OutLoRA)
		return
	case ev.ExtraKeys:
		refuse(OutExtraKeys)
		return
	case ev.Group != 0:
		refuse(OutGroup)
		return
	case ev.SpecKind != "" && !strings.Contains(strings.ToLower(ev.SpecKind), "full"):
		refuse(OutSpecKind)
		return
	}
	s := ix.streams[id]
	if len(ev.Tokens) == 0 {
		// A tier update without tokens (offload connectors): only blocks already known.
		for _, h := range ev.Hashes {
			key, known := uint64(0), false
			if s != nil {
				key, known = s.engine[h]
			}
			if !known {
				ix.m.count(OutUnknownBlock, 1)
				continue
			}
			pk := pair(key, s.salt)
			ix.entries[pk] |= 1 << med
			ix.m.count(OutTierAdded, 1)
		}
		return
	}
	bs := ev.BlockSize
	if bs <= 0 || len(ev.Tokens) != n*bs {
		refuse(OutNonDense)
		return
	}
	parent := ix.root
	if ev.HasParent {
		key, known := uint64(0), false
		if s != nil {
			key, known = s.engine[ev.Parent]
		}
		if !known {
			refuse(OutUnknownParent)
			return
		}
		parent = key
	}
	if s == nil {
		s = ix.addStream(id, bs)
	} else if s.blockSize != bs {
		// A new block size means a restarted engine with another configuration.
		ix.m.dropped.WithLabelValues("block_size_changed").Add(float64(ix.clear(s)))
		ix.sizes[s.blockSize]--
		if ix.sizes[s.blockSize] == 0 {
			delete(ix.sizes, s.blockSize)
		}
		s.blockSize = bs
		ix.sizes[bs]++
	}
	for i, h := range ev.Hashes {
		key := chain(parent, ev.Tokens[i*bs:(i+1)*bs])
		s.engine[h] = key
		pk := pair(key, s.salt)
		v, had := ix.entries[pk]
		if !had {
			ix.stamp++
			v = ix.stamp << 8
		}
		ix.entries[pk] = v | 1<<med
		parent = key
	}
	ix.m.count(OutStored, n)
}

func (ix *Index) addStream(id streamID, bs int) *stream {
	ix.salt = fmix(ix.salt + 0x9e3779b97f4a7c15)
	s := &stream{id: id, salt: ix.salt, blockSize: bs, engine: map[uint64]uint64{}}
	ix.streams[id] = s
	ix.byEP[id.endpoint] = append(ix.byEP[id.endpoint], s)
	ix.sizes[bs]++
	return s
}

// clear removes every entry of s and returns how many there were. ix.mu is held.
func (ix *Index) clear(s *stream) int {
	n := len(s.engine)
	for _, key := range s.engine {
		delete(ix.entries, pair(key, s.salt))
	}
	clear(s.engine)
	return n
}

// Drop forgets everything endpoint holds, on every rank (it left the fleet, or its
// stream can no longer be trusted). reason labels loadaware_kvevents_dropped_blocks_total.
func (ix *Index) Drop(endpoint, reason string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	for _, s := range ix.byEP[endpoint] {
		n += ix.clear(s)
		delete(ix.streams, s.id)
		ix.sizes[s.blockSize]--
		if ix.sizes[s.blockSize] == 0 {
			delete(ix.sizes, s.blockSize)
		}
	}
	delete(ix.byEP, endpoint)
	ix.m.dropped.WithLabelValues(reason).Add(float64(n))
}

// Match is how much of a prompt one endpoint holds.
type Match struct {
	Matched    int // credited tokens of the contiguous cached prefix from the first block
	HolderRank int // order among the endpoints asked in which it stored the first block; -1 if it does not hold it
}

// Match returns, for each endpoint (aligned), the credited tokens of the longest
// contiguous prefix of tokens it holds in a credited tier, on its best rank, and the
// order in which the holders of the first block stored it.
func (ix *Index) Match(tokens []uint32, endpoints []string) []Match {
	out := make([]Match, len(endpoints))
	stamps := make([]uint64, len(endpoints))
	for i := range out {
		out[i].HolderRank = -1
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	var keys map[int][]uint64 // block size -> the prompt's block keys
	for i, ep := range endpoints {
		for _, s := range ix.byEP[ep] {
			bs := s.blockSize
			ks, ok := keys[bs]
			if !ok {
				ks = ix.promptKeys(tokens, bs)
				if keys == nil {
					keys = make(map[int][]uint64, len(ix.sizes))
				}
				keys[bs] = ks
			}
			credit, first := 0.0, uint64(0)
			for j, k := range ks {
				v, held := ix.entries[pair(k, s.salt)]
				c := ix.best(v)
				if !held || c == 0 {
					break
				}
				if j == 0 {
					first = v >> 8
				}
				credit += c * float64(bs)
			}
			if m := int(math.Round(credit)); m > out[i].Matched {
				out[i].Matched, stamps[i] = m, first
			}
		}
	}
	ranked := make([]int, 0, len(endpoints))
	for i := range out {
		if stamps[i] != 0 {
			ranked = append(ranked, i)
		}
	}
	slices.SortFunc(ranked, func(a, b int) int { return cmpU64(stamps[a], stamps[b]) })
	for r, i := range ranked {
		out[i].HolderRank = r
	}
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// best is the credit of the best tier in an entry's tier bits.
func (ix *Index) best(v uint64) float64 {
	c := 0.0
	for m := range numMedia {
		if v&(1<<m) != 0 {
			c = max(c, ix.credit[m])
		}
	}
	return c
}

// promptKeys returns the keys of the prompt's full blocks of bs tokens.
func (ix *Index) promptKeys(tokens []uint32, bs int) []uint64 {
	ks := make([]uint64, len(tokens)/bs)
	parent := ix.root
	for j := range ks {
		parent = chain(parent, tokens[j*bs:(j+1)*bs])
		ks[j] = parent
	}
	return ks
}
