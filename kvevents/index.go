package kvevents

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	mbits "math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
	switch s { // vLLM's spellings, without lowering a copy
	case "", "GPU":
		return GPU, true
	case "CPU":
		return CPU, true
	}
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
	root   uint64
	m      *indexMetrics

	held   [numMedia]ctable // wordKey(block key, slot/64) -> bitmask of slots holding it
	stamps ctable           // pair(first block key, stream salt) -> store order
	dir    atomic.Pointer[directory]
	last   atomic.Pointer[resolution] // see groupsFor

	// What follows is the writers' (lookups read the fields above, and take mu only to
	// ask again; see Match).
	_       linePad
	mu      rwspin
	streams map[streamID]*stream
	byEP    map[string][]*stream
	free    []int // released slots
	slots   int   // slots handed out
	stamp   uint64
	salt    uint64

	sink atomic.Uint64 // what warm read, kept so that its loads are not removed
}

type streamID struct {
	endpoint string
	rank     int
}

// stream is one publisher's view: an endpoint's data-parallel rank.
type stream struct {
	id        streamID
	slot      int
	salt      uint64
	blockSize int
	engine    table // engine block hash -> block key
}

func (s *stream) word() uint64 { return uint64(s.slot / 64) }
func (s *stream) bit() uint64  { return 1 << (s.slot % 64) }

// wordKey is the key of (block key, slot word) in the tier tables.
func wordKey(key, word uint64) uint64 { return key ^ word*0x9e3779b97f4a7c15 }

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
		streams: map[streamID]*stream{},
		byEP:    map[string][]*stream{},
	}
	for m := range numMedia {
		if ix.credit[m] > 0 {
			ix.order = append(ix.order, m)
		}
	}
	slices.SortStableFunc(ix.order, func(a, b Medium) int { return cmpF(ix.credit[b], ix.credit[a]) })
	if ix.root == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		ix.root = binary.LittleEndian.Uint64(b[:]) | 1
	}
	ix.salt = fmix(ix.root + 0x632be59bd9b4e019)
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
	if ev.Kind != AllBlocksCleared {
		if med, ok := ParseMedium(ev.Medium); ok {
			ix.warm(id, ev, med, 0, 0, false)
		}
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	switch ev.Kind {
	case AllBlocksCleared:
		if s := ix.streams[id]; s != nil {
			ix.m.dropped.WithLabelValues("cleared").Add(float64(ix.clear(s)))
		}
	case BlockRemoved:
		ix.remove(ix.streams[id], ev)
	case BlockStored:
		ix.store(id, ev)
	}
}

// setBit and clearBit change one stream's bit for key in a tier table.
func (ix *Index) setBit(med Medium, s *stream, key uint64) {
	ix.held[med].or(wordKey(key, s.word()), s.bit())
}

func (ix *Index) clearBit(med Medium, s *stream, key uint64) {
	wk := wordKey(key, s.word())
	v, ok := ix.held[med].get(wk)
	if !ok {
		return
	}
	if v &^= s.bit(); v == 0 {
		ix.held[med].del(wk)
	} else {
		ix.held[med].put(wk, v)
	}
}

func (ix *Index) holds(s *stream, key uint64) bool {
	wk := wordKey(key, s.word())
	for m := range numMedia {
		if v, _ := ix.held[m].get(wk); v&s.bit() != 0 {
			return true
		}
	}
	return false
}

func (ix *Index) remove(s *stream, ev *Event) {
	med, ok := ParseMedium(ev.Medium)
	if !ok {
		ix.m.count(OutUnknownMedium, len(ev.Hashes))
		return
	}
	// Outcomes are counted once per hold, not per block (a count costs about as much as
	// a block's removal).
	removed, unknown := 0, 0
	defer func() {
		ix.m.count(OutRemoved, removed)
		ix.m.count(OutRemovedUnknown, unknown)
	}()
	for i, h := range ev.Hashes {
		if i > 0 && i%removeSpan == 0 && s != nil {
			ix.m.count(OutRemoved, removed)
			ix.m.count(OutRemovedUnknown, unknown)
			removed, unknown = 0, 0
			if !ix.yield(s.id, s, ev, med, i, 0) {
				return // the stream was dropped meanwhile: nothing left to remove
			}
		}
		key, held := uint64(0), false
		if s != nil {
			key, held = s.engine.get(h)
		}
		if !held {
			unknown++
			continue
		}
		ix.clearBit(med, s, key)
		if !ix.holds(s, key) {
			s.engine.del(h)
			ix.stamps.del(pair(key, s.salt))
		}
		removed++
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
		added := 0
		for _, h := range ev.Hashes {
			key, known := uint64(0), false
			if s != nil {
				key, known = s.engine.get(h)
			}
			if !known {
				continue
			}
			ix.setBit(med, s, key)
			added++
		}
		ix.m.count(OutTierAdded, added)
		ix.m.count(OutUnknownBlock, n-added)
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
			key, known = s.engine.get(ev.Parent)
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
		ix.resize(s, bs)
	}
	for i, h := range ev.Hashes {
		if i > 0 && i%lockSpan == 0 && !ix.yield(id, s, ev, med, i, parent) {
			ix.m.count(OutStored, i)
			ix.m.count(OutUnknownParent, n-i)
			return
		}
		key := chain(parent, ix.root, ev.Tokens[i*bs:(i+1)*bs])
		s.engine.put(h, key)
		if i == 0 && !ev.HasParent {
			// The store order before the block: a lookup that sees the block held finds it.
			if _, had := ix.stamps.get(pair(key, s.salt)); !had {
				ix.stamp++
				ix.stamps.put(pair(key, s.salt), ix.stamp)
			}
		}
		ix.setBit(med, s, key)
		parent = key
	}
	ix.m.count(OutStored, n)
}

// lockSpan is how many blocks of one event are applied under one hold of the write
// lock: the lock's readers (warm, Blocks, and a lookup that asks again under it: see
// Match) wait at most that long for a writer. A partly applied store is a valid shorter
// chain; a partly applied removal a valid smaller set. Lookups take no lock and do not
// wait for holds (docs/decisions/0805); 8 was chosen when they did (0804).
const lockSpan = 8

// removeSpan is lockSpan for removals, which cost about twice a store per block (8
// removals held the lock 1.5-2.5 µs, 8 stores 0.5-0.75 µs; docs/decisions/0804).
const removeSpan = lockSpan / 2

// yield lets the lock's waiting readers in between parts of a long event, warms the next part
// (blocks from next, whose parent key is parent when ev is a store), and reports whether
// s is still the stream of id. ix.mu is held, and is held again on return.
func (ix *Index) yield(id streamID, s *stream, ev *Event, med Medium, next int, parent uint64) bool {
	ix.mu.Unlock()
	ix.warm(id, ev, med, next, parent, true)
	ix.mu.Lock()
	return ix.streams[id] == s
}

// warm reads, under the read lock, the table slots that applying the next hold's blocks
// of ev (from next) will write, so that the write lock is then held over cached
// memory: a block's writes miss the cache in the 10^6-block tables, and a lookup waits
// for a whole hold (docs/decisions/0804). parent is the key of block next-1 when
// parentKnown; otherwise the event's own parent is looked up. It changes nothing.
func (ix *Index) warm(id streamID, ev *Event, med Medium, next int, parent uint64, parentKnown bool) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := ix.streams[id]
	if s == nil {
		return
	}
	end := min(next+lockSpan, len(ev.Hashes))
	if ev.Kind == BlockRemoved {
		end = min(next+removeSpan, len(ev.Hashes))
	}
	var sum uint64
	switch ev.Kind {
	case BlockStored:
		bs := ev.BlockSize
		if bs != s.blockSize || len(ev.Tokens) != len(ev.Hashes)*bs {
			return
		}
		if !parentKnown {
			parent = ix.root
			if ev.HasParent {
				k, ok := s.engine.get(ev.Parent)
				if !ok {
					return
				}
				parent = k
			}
		}
		for i := next; i < end; i++ {
			parent = chain(parent, ix.root, ev.Tokens[i*bs:(i+1)*bs])
			sum += s.engine.touch(ev.Hashes[i]) + ix.held[med].touch(wordKey(parent, s.word()))
			if i == 0 && !ev.HasParent {
				sum += ix.stamps.touch(pair(parent, s.salt))
			}
		}
	case BlockRemoved:
		for i := next; i < end; i++ {
			if key, ok := s.engine.get(ev.Hashes[i]); ok {
				sum += ix.held[med].touch(wordKey(key, s.word())) + ix.stamps.touch(pair(key, s.salt))
			}
		}
	}
	ix.sink.Store(sum)
}

func (ix *Index) resize(s *stream, bs int) {
	s.blockSize = bs
	ix.publish(s.id.endpoint)
}

func (ix *Index) addStream(id streamID, bs int) *stream {
	ix.salt = fmix(ix.salt + 0x9e3779b97f4a7c15)
	slot := ix.slots
	if n := len(ix.free); n > 0 {
		slot, ix.free = ix.free[n-1], ix.free[:n-1]
	} else {
		ix.slots++
	}
	s := &stream{id: id, slot: slot, salt: ix.salt, blockSize: bs}
	ix.streams[id] = s
	ix.byEP[id.endpoint] = append(ix.byEP[id.endpoint], s)
	ix.publish(id.endpoint)
	return s
}

// directory is what lookups know of the streams: for each endpoint, its streams' slots,
// salts and block sizes. A directory is never changed; a writer that adds, forgets or
// resizes a stream publishes a new one (ix.mu held), before the slot it frees can be
// handed out again. A lookup may still read a slot through an older directory after
// the slot went to another stream; see Match for why that is never credited.
type directory struct {
	byEP map[string][]streamRef
}

// streamRef is a stream as a directory records it.
type streamRef struct {
	slot      int
	salt      uint64
	blockSize int
}

func (r streamRef) word() uint64 { return uint64(r.slot / 64) }
func (r streamRef) bit() uint64  { return 1 << (r.slot % 64) }

// publish replaces endpoint's streams in the directory by those of ix.byEP. ix.mu is
// held.
func (ix *Index) publish(endpoint string) {
	byEP := map[string][]streamRef{}
	if old := ix.dir.Load(); old != nil {
		byEP = maps.Clone(old.byEP)
	}
	if ss := ix.byEP[endpoint]; len(ss) > 0 {
		refs := make([]streamRef, len(ss))
		for i, s := range ss {
			refs[i] = streamRef{slot: s.slot, salt: s.salt, blockSize: s.blockSize}
		}
		byEP[endpoint] = refs
	} else {
		delete(byEP, endpoint)
	}
	ix.dir.Store(&directory{byEP: byEP})
}

// clear removes every entry of s and returns how many there were. ix.mu is held.
func (ix *Index) clear(s *stream) int {
	n := s.engine.Len()
	s.engine.each(func(_, key uint64) {
		for m := range numMedia {
			ix.clearBit(m, s, key)
		}
		ix.stamps.del(pair(key, s.salt))
	})
	s.engine.reset()
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
		ix.forget(s)
	}
	delete(ix.byEP, endpoint)
	ix.publish(endpoint)
	ix.m.dropped.WithLabelValues(reason).Add(float64(n))
}

// DropRank forgets what one rank of endpoint holds (its stream can no longer be trusted,
// or it stopped). reason labels loadaware_kvevents_dropped_blocks_total.
func (ix *Index) DropRank(endpoint string, rank int, reason string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := ix.streams[streamID{endpoint, rank}]
	if s == nil {
		return
	}
	ix.m.dropped.WithLabelValues(reason).Add(float64(ix.clear(s)))
	ix.forget(s)
	rest := slices.DeleteFunc(ix.byEP[endpoint], func(o *stream) bool { return o == s })
	if len(rest) == 0 {
		delete(ix.byEP, endpoint)
	} else {
		ix.byEP[endpoint] = rest
	}
	ix.publish(endpoint)
}

// forget removes an emptied stream and frees its slot. ix.mu is held.
func (ix *Index) forget(s *stream) {
	delete(ix.streams, s.id)
	ix.free = append(ix.free, s.slot)
}

// Match is how much of a prompt one endpoint holds.
type Match struct {
	Matched    int // credited tokens of the contiguous cached prefix from the first block
	HolderRank int // order among the endpoints asked in which it stored the first block; -1 if it does not hold it
}

// Match returns, for each endpoint (aligned), the credited tokens of the longest
// contiguous prefix of tokens it holds in a credited tier, on its best rank, and the
// order in which the holders of the first block stored it.
//
// Match takes no lock, so events may be applied while it reads. What it credits was
// held: each block credited to a rank in a tier was held by that rank in that tier at
// some instant during the call, and each store order it ranks by was that rank's. It is
// not a snapshot of one instant (a chain being stored or removed meanwhile may be seen
// partly), just as an event applied in holds is seen partly by lookups between them.
// Without concurrent events the result is the index's state exactly.
//
// The stream's epoch is its salt, which no other stream ever has: a rank is credited
// only if its store order of block 0, keyed by its salt, is found after its blocks were
// read. That proves the rank still existed then, so the slot read was its own all along
// (a dropped stream never comes back; its slot may go to another stream only after it
// was dropped). A rank seen holding block 0 without a store order (block 0 removed
// meanwhile) makes the lookup look again; after two such tries, it looks under the
// writers' lock (docs/decisions/0805).
func (ix *Index) Match(tokens []uint32, endpoints []string) []Match {
	return ix.AppendMatch(make([]Match, 0, len(endpoints)), tokens, endpoints)
}

// AppendMatch is Match with the result appended to dst (one entry per endpoint, aligned
// from len(dst)). A caller that passes the same dst[:0] again makes a lookup allocate
// nothing (an allocated result costs a lookup a refill of the allocator's cache every
// few dozen lookups, and the collector's work; docs/decisions/0805).
func (ix *Index) AppendMatch(dst []Match, tokens []uint32, endpoints []string) []Match {
	dst = slices.Grow(dst, len(endpoints))
	out := dst[len(dst) : len(dst)+len(endpoints)]
	dst = dst[:len(dst)+len(endpoints)]
	sc := scratchPool.Get().(*matchScratch)
	defer scratchPool.Put(sc)
	sc.keys = sc.keys[:0] // hashed once per lookup, for every try
	for range 2 {
		if ix.match(tokens, endpoints, out, sc, false) {
			return dst
		}
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	ix.match(tokens, endpoints, out, sc, true)
	return dst
}

// match fills out from the tables as they are read. Unless locked (ix.mu read-locked:
// no writer), it reports false when it saw a rank hold block 0 without a store order.
func (ix *Index) match(tokens []uint32, endpoints []string, out []Match, sc *matchScratch, locked bool) bool {
	dir := ix.dir.Load()
	for i := range out {
		out[i] = Match{HolderRank: -1}
	}
	groups := ix.groupsFor(dir, endpoints, sc)
	stamps := append(sc.stamps[:0], make([]uint64, len(endpoints))...)
	sc.stamps = stamps
	// The tiers that hold anything, best credit first, and their arrays as they are now
	// (an array copied meanwhile keeps the state it was copied in).
	var act [numMedia]Medium
	var arrs [numMedia]*slotArray
	na := 0
	for _, m := range ix.order {
		if ix.held[m].NonEmpty() {
			act[na], na = m, na+1
			arrs[na-1] = ix.held[m].arr.Load()
		}
	}
	var credit [64]float64
	for gi := range groups {
		g := &groups[gi]
		keys := sc.keysFor(ix, tokens, g.bs)
		if len(keys) == 0 {
			continue
		}
		var alive uint64
		for _, w := range g.ws {
			alive |= w.s.bit()
		}
		clear(credit[:])
		// A run of blocks credited alike (the same slots by the same tiers) is credited
		// at once: a slot's credit changes only where its prefix ends, or where a tier
		// changes. That adds the same numbers when every tier's credit of a block is a
		// multiple of 2^-10 (sums exact in any order); otherwise, block by block.
		var cm [numMedia]float64
		exact := len(tokens) < 1<<40
		for a := range na {
			cm[a] = ix.credit[act[a]] * float64(g.bs)
			if x := cm[a] * 1024; x != math.Trunc(x) {
				exact = false
			}
		}
		var prev, cur [numMedia]uint64
		run := 0
		flush := func() {
			for a := range na {
				c := float64(run) * cm[a]
				for bits := prev[a]; bits != 0; bits &= bits - 1 {
					credit[mbits.TrailingZeros64(bits)] += c
				}
			}
		}
		rest := keys
		if na == 1 && exact && arrs[0] != nil {
			// One tier holds anything (a fleet without offloading), probed in a loop of
			// its own. A slot leaves the prefix once (alive only loses bits), so its
			// credit is the blocks before it left times the tier's credit of a block
			// (the same number as the runs' sum below: the credit is exact).
			sl := arrs[0].slots
			for j, k := range keys {
				wk := wordKey(k, g.word)
				var v uint64
				if wk <= tombKey {
					v, _ = ix.held[act[0]].get(wk)
				} else {
					for i := arrs[0].home(wk); ; {
						if k := sl[i].k.Load(); k == wk {
							v = sl[i].v.Load()
							break
						} else if k == emptyKey {
							break
						}
						if i++; i == len(sl) {
							i = 0
						}
					}
				}
				bits := v & alive
				for gone := alive &^ bits; gone != 0; gone &= gone - 1 {
					credit[mbits.TrailingZeros64(gone)] = float64(j) * cm[0]
				}
				if alive = bits; alive == 0 {
					break
				}
			}
			for ; alive != 0; alive &= alive - 1 {
				credit[mbits.TrailingZeros64(alive)] = float64(len(keys)) * cm[0]
			}
			rest = nil // probed
		}
		for _, k := range rest {
			wk := wordKey(k, g.word)
			var covered uint64
			for a := range na {
				var v uint64
				switch {
				case wk <= tombKey:
					v, _ = ix.held[act[a]].get(wk)
				case arrs[a] != nil:
					// arrs[a].lookup(wk), by hand: the call is most of a probe's cost.
					sl := arrs[a].slots
					for i := arrs[a].home(wk); ; {
						if k := sl[i].k.Load(); k == wk {
							v = sl[i].v.Load()
							break
						} else if k == emptyKey {
							break
						}
						if i++; i == len(sl) {
							i = 0
						}
					}
				}
				bits := v & alive &^ covered
				cur[a] = bits
				covered |= bits
			}
			if exact && cur == prev {
				run++
			} else {
				flush()
				prev, run = cur, 1
			}
			if alive = covered; alive == 0 {
				break
			}
		}
		flush()
		for _, w := range g.ws {
			m := int(math.Round(credit[w.s.slot%64]))
			if m == 0 || m < out[w.ep].Matched {
				continue
			}
			st, _ := ix.stamps.get(pair(keys[0], w.s.salt))
			if st == 0 && !locked {
				// Block 0 seen held, its store order not: the rank removed block 0, or
				// was dropped (its slot may then be another stream's), meanwhile.
				return false
			}
			if m == out[w.ep].Matched && st >= stamps[w.ep] {
				continue // a tie between ranks: the earlier store counts
			}
			out[w.ep].Matched, stamps[w.ep] = m, st
		}
	}
	ranked := sc.ranked[:0]
	for i := range out {
		if stamps[i] != 0 {
			ranked = append(ranked, i)
		}
	}
	sc.ranked = ranked
	slices.SortFunc(ranked, func(a, b int) int { return cmpU64(stamps[a], stamps[b]) })
	for r, i := range ranked {
		out[i].HolderRank = r
	}
	return true
}

// groupsFor returns the streams of endpoints in dir, grouped by block size, then by slot
// word (usually one group: a fleet has one block size and up to 64 streams). The caller
// must not change them. The grouping of the last list asked twice in a row (on one P)
// is kept in ix.last, and reused while the directory stays the same: a fleet's lookups
// usually ask about the same list, and comparing it costs less than finding each
// endpoint's streams.
func (ix *Index) groupsFor(dir *directory, endpoints []string, sc *matchScratch) []group {
	if r := ix.last.Load(); r != nil && r.dir == dir && slices.Equal(r.endpoints, endpoints) {
		return r.groups
	}
	groups := sc.groups[:0]
	for i, ep := range endpoints {
		for _, s := range dir.byEP[ep] {
			g := slices.IndexFunc(groups, func(g group) bool { return g.bs == s.blockSize && g.word == s.word() })
			if g < 0 {
				if len(groups) < cap(groups) {
					groups = groups[:len(groups)+1]
					groups[len(groups)-1].bs, groups[len(groups)-1].word = s.blockSize, s.word()
					groups[len(groups)-1].ws = groups[len(groups)-1].ws[:0]
				} else {
					groups = append(groups, group{bs: s.blockSize, word: s.word()})
				}
				g = len(groups) - 1
			}
			groups[g].ws = append(groups[g].ws, want{i, s})
		}
	}
	sc.groups = groups
	if slices.Equal(sc.missed, endpoints) {
		r := &resolution{dir: dir, endpoints: slices.Clone(endpoints), groups: make([]group, len(groups))}
		for i, g := range groups {
			r.groups[i] = group{bs: g.bs, word: g.word, ws: slices.Clone(g.ws)}
		}
		ix.last.Store(r)
	}
	sc.missed = append(sc.missed[:0], endpoints...)
	return groups
}

// resolution is the grouping of one endpoint list's streams in one directory. It is
// never changed once published.
type resolution struct {
	dir       *directory
	endpoints []string
	groups    []group
}

// The streams a lookup asks about, grouped by block size and slot word.
type want struct {
	ep int // index in endpoints
	s  streamRef
}

type group struct {
	bs   int
	word uint64
	ws   []want
}

// matchScratch is a lookup's working memory, reused through scratchPool so that a
// lookup allocates only its result.
type matchScratch struct {
	groups []group
	stamps []uint64
	ranked []int
	keys   []promptKeys // the prompt's block keys, per block size
	missed []string     // the last endpoint list not found in ix.last
}

type promptKeys struct {
	bs   int
	keys []uint64
}

var scratchPool = sync.Pool{New: func() any { return new(matchScratch) }}

// keysFor returns the prompt's block keys for block size bs, computed once per lookup
// (sc.keys is emptied at the start of a lookup: see Match).
func (sc *matchScratch) keysFor(ix *Index, tokens []uint32, bs int) []uint64 {
	for _, pk := range sc.keys {
		if pk.bs == bs {
			return pk.keys
		}
	}
	var buf []uint64
	if n := len(sc.keys); n < cap(sc.keys) {
		buf = sc.keys[:n+1][n].keys
	}
	ks := ix.appendPromptKeys(buf[:0], tokens, bs)
	sc.keys = append(sc.keys, promptKeys{bs, ks})
	return ks
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

// promptKeys returns the keys of the prompt's full blocks of bs tokens.
func (ix *Index) promptKeys(tokens []uint32, bs int) []uint64 {
	return ix.appendPromptKeys(nil, tokens, bs)
}

// appendPromptKeys appends the keys of the prompt's full blocks of bs tokens to ks.
func (ix *Index) appendPromptKeys(ks []uint64, tokens []uint32, bs int) []uint64 {
	n := len(tokens) / bs
	ks = slices.Grow(ks, n)
	if bs == 16 {
		return appendChain16(ks, ix.root, ix.root, tokens[:n*16])
	}
	parent := ix.root
	for j := range n {
		parent = chain(parent, ix.root, tokens[j*bs:(j+1)*bs])
		ks = append(ks, parent)
	}
	return ks
}
