package lmcache

import "sync"

// The key table: chunk key -> the slots holding it, in 64 shards, each behind its own
// read-write lock held for one key at a time. Each slot keeps the set of its own keys (the
// reverse index), so dropping a worker walks only its keys.

type shard struct {
	mu    sync.RWMutex
	m     map[int64]holders
	lists [][]uint32 // holders' overflow lists, by holders.more-1; guarded by mu
	free  []uint32   // indices of lists not in use
	_     [32]byte   // keep neighbouring shards' locks off one cache line
}

func (ix *Index) shardOf(key int64) *shard {
	return &ix.shards[(uint64(key)*0x9E3779B97F4A7C15)>>58]
}

// holdersOf appends the slots holding key, in admission order, to dst, and returns the
// key's use stamp.
func (ix *Index) holdersOf(key int64, dst []uint32) ([]uint32, uint32) {
	sh := ix.shardOf(key)
	sh.mu.RLock()
	h := sh.m[key]
	dst = sh.appendTo(h, dst)
	sh.mu.RUnlock()
	return dst, h.used
}

// admit records that w holds key at loc; it reports whether the key was new for that slot.
func (ix *Index) admit(w *worker, loc string, key int64) bool {
	if w.inst.superseded {
		// Its IP belongs to a newer instance: its chunks were swept and are not kept.
		ix.met.op(false, false)
		return false
	}
	s := w.slots[loc]
	if s == nil {
		s = &slot{id: ix.nextSlot, w: w, loc: loc, keys: map[int64]struct{}{}}
		ix.nextSlot++
		w.slots[loc] = s
		ix.slotByID[s.id] = s
		if iv := w.inst.iv; iv != nil {
			ix.setSlot(s.id, iv)
		}
	}
	tick := ix.tick.Add(1)
	sh := ix.shardOf(key)
	if _, ok := s.keys[key]; ok {
		ix.met.op(false, false)
		sh.mu.Lock()
		if h, ok := sh.m[key]; ok {
			h.used = tick
			sh.m[key] = h
		}
		sh.mu.Unlock()
		return false
	}
	s.keys[key] = struct{}{}
	sh.mu.Lock()
	h := sh.m[key]
	if h.empty() {
		ix.nkeys.Add(1)
	}
	h = sh.add(h, s.id)
	h.used = tick
	sh.m[key] = h
	sh.mu.Unlock()
	ix.met.op(false, true)
	if ix.det != nil && w.inst.ip != "" {
		ix.det.Admitted(w.inst.ip, key)
	}
	return true
}

// evict records that w dropped key from loc; it reports whether w held it there.
func (ix *Index) evict(w *worker, loc string, key int64) bool {
	s := w.slots[loc]
	if s == nil {
		ix.met.op(true, false)
		return false
	}
	if _, ok := s.keys[key]; !ok {
		ix.met.op(true, false)
		return false
	}
	delete(s.keys, key)
	ix.unhold(key, s.id)
	ix.met.op(true, true)
	return true
}

func (ix *Index) unhold(key int64, id uint32) {
	sh := ix.shardOf(key)
	sh.mu.Lock()
	h, ok := sh.remove(sh.m[key], id)
	if ok {
		if h.empty() {
			delete(sh.m, key)
			ix.nkeys.Add(-1)
		} else {
			sh.m[key] = h
		}
	}
	sh.mu.Unlock()
}

// endSync makes the keys sent under the sync the worker's whole key set at the location.
// When the worker's count disagrees with what arrived (a lost batch), nothing is evicted.
func (ix *Index) endSync(w *worker, m FullSyncEndMsg) bool {
	sk := syncKey{m.InstanceID, m.WorkerID, m.Location}
	fs := ix.syncs[sk]
	if fs == nil || fs.id != m.SyncID {
		return false
	}
	delete(ix.syncs, sk)
	if fs.overflow || len(fs.keys) != m.ActualTotalKeys {
		ix.log.Warn("lmcache: full sync ended with a different key count than received (a batch was lost); keeping the union of old and synced keys",
			"instance", m.InstanceID, "worker", m.WorkerID, "location", m.Location, "sent", m.ActualTotalKeys, "received", len(fs.keys))
		return true
	}
	if s := w.slots[m.Location]; s != nil {
		for k := range s.keys {
			if _, ok := fs.keys[k]; !ok {
				ix.evict(w, m.Location, k)
			}
		}
	}
	return true
}

// dropSlots forgets every key of w. The slots are retired (new admits get new slot ids)
// and their view entries cleared before the keys are purged, so lookups stop crediting
// them at once; the cost is w's keys, whatever the size of the registry. w's slot map is
// emptied and kept, not replaced, so a drop allocates nothing.
func (ix *Index) dropSlots(w *worker) {
	for sk := range ix.syncs {
		if sk.instance == w.inst.id && sk.worker == w.id {
			delete(ix.syncs, sk)
		}
	}
	for _, s := range w.slots {
		ix.setSlot(s.id, nil)
	}
	for _, s := range w.slots {
		delete(ix.slotByID, s.id)
		for k := range s.keys {
			ix.unhold(k, s.id)
		}
	}
	clear(w.slots)
}

// Keys returns the number of distinct chunk keys held by at least one worker.
func (ix *Index) Keys() int { return int(ix.nkeys.Load()) }
