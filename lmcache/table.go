package lmcache

import (
	"runtime"
	"sync"
)

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
	ix.readLock(sh)
	h := sh.m[key]
	dst = sh.appendTo(h, dst)
	sh.mu.RUnlock()
	return dst, h.used
}

// readYields is how many times a lookup that finds a key's shard locked yields its
// processor and tries the lock again before it waits on it (see readLock).
const readYields = 64

// readLock takes sh's read lock for a lookup. A writer holds a shard's lock for one key's
// update (a map assignment; now and then the map grows), so a lookup that finds it held
// yields its processor (runtime.Gosched: the writer, if it waits for one, gets it) and tries
// again, up to readYields times, before it waits on the lock. Waiting at once, parked on the
// lock until the writer's unlock readies it, cost each lookup that met a held lock tens of
// microseconds: while ingesting 450k messages/s, p99.9 of lookups was 21-42 µs against
// 5-7 µs yielding (decision 1100, addendum of 2026-12-04). Each way is counted in
// loadaware_lmcache_lookup_lock_waits_total.
func (ix *Index) readLock(sh *shard) {
	if sh.mu.TryRLock() {
		return
	}
	for range readYields {
		runtime.Gosched()
		if sh.mu.TryRLock() {
			ix.met.lockWaits[0].Inc()
			return
		}
	}
	ix.met.lockWaits[1].Inc()
	sh.mu.RLock()
}

// admit records that w holds key at loc; it reports whether the key was new for that slot.
// Like evict, it first purges up to purgePerOp keys of retired slots (see purge).
func (ix *Index) admit(w *worker, loc string, key int64) bool {
	if ix.retiredKeys > 0 {
		ix.purge(purgePerOp)
	}
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
	if ix.retiredKeys > 0 {
		ix.purge(purgePerOp)
	}
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

// dropSlots forgets every key of w now: it retires w's slots (see retireSlots) and
// purges their keys from the key table before it returns. The cost is w's keys, whatever
// the size of the registry.
func (ix *Index) dropSlots(w *worker) {
	n := len(ix.retired)
	ix.retireSlots(w)
	for _, s := range ix.retired[n:] {
		ix.purgeSlot(s, -1)
	}
	clear(ix.retired[n:])
	ix.retired = ix.retired[:n]
}

// retireSlots takes w's slots away from it, in time proportional to their number, not to
// their keys: each slot's view entry is cleared first, so no lookup that starts afterwards
// credits it (slot ids are never reused, and a lookup credits a holder only through its
// view entry), then it leaves slotByID and w, and joins ix.retired, whose keys are purged
// from the key table later (see purge). w's slot map is emptied and kept, not replaced, so
// this allocates nothing; new admits of w get new slots.
func (ix *Index) retireSlots(w *worker) {
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
		if len(s.keys) > 0 {
			ix.retired = append(ix.retired, s)
			ix.retiredKeys += len(s.keys)
		}
	}
	clear(w.slots)
}

// purgePerOp is how many keys of retired slots each key operation applied (an admit or
// an evict, alone or in a batch or full sync) purges from the key table. A registration
// (restart or supersede) retires its old slots' keys in constant time; the key traffic
// that follows purges them at this rate, so no message pays for more than
// purgePerOp of them, and Sweep (every 5 s from the Server) and the budget purge the rest.
const purgePerOp = 2

// purge removes up to limit keys of retired slots (all of them when limit < 0) from the
// key table, oldest slot first, and returns how many it removed. Called with ix.mu held.
func (ix *Index) purge(limit int) int {
	done := 0
	for ix.retiredHead < len(ix.retired) && (limit < 0 || done < limit) {
		s := ix.retired[ix.retiredHead]
		rest := -1
		if limit >= 0 {
			rest = limit - done
		}
		done += ix.purgeSlot(s, rest)
		if len(s.keys) > 0 {
			break
		}
		ix.retired[ix.retiredHead] = nil
		ix.retiredHead++
	}
	if ix.retiredHead == len(ix.retired) && ix.retiredHead > 0 {
		// Emptied: the next registration appends at the front of the same array, without
		// allocating (unless the array grew large in a burst: that one goes).
		ix.retired, ix.retiredHead = ix.retired[:0], 0
		if cap(ix.retired) > 1024 {
			ix.retired = nil
		}
	}
	return done
}

// purgeSlot removes up to limit (all when limit < 0) of retired slot s's keys from the key
// table and from s, and returns how many.
func (ix *Index) purgeSlot(s *slot, limit int) int {
	n := 0
	for k := range s.keys {
		if n == limit {
			break
		}
		ix.unhold(k, s.id)
		delete(s.keys, k)
		n++
	}
	ix.retiredKeys -= n
	return n
}

// Keys returns the number of distinct chunk keys held by at least one live slot: a key
// held only by slots a registration retired (a restarted worker's old slots, a superseded
// instance's) is not counted from the moment of the registration, although it stays in
// the key table until it is purged (see purge and RetiredKeys). It is the value of
// loadaware_lmcache_index_keys.
//
// It costs the retired slots' keys not yet purged (a read of each, under the writer
// lock), nothing else: none most of the time, since the key traffic purges them and Sweep
// (every 5 s from the Server) purges what is left.
func (ix *Index) Keys() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return int(ix.nkeys.Load()) - ix.retiredOnly()
}

// RetiredKeys returns the keys that slots retired by a registration still hold in the key
// table, awaiting purge: no lookup credits them and Keys does not count them, but they
// take memory (and count against the key budget, which purges them first). A key held
// by two retired slots counts twice. It is the value of loadaware_lmcache_retired_keys.
func (ix *Index) RetiredKeys() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.retiredKeys
}

// retiredOnly returns how many keys of the table are held by retired slots only. Each
// such key is counted at the first slot of its holder list, which is then a retired one.
// Called with ix.mu held.
func (ix *Index) retiredOnly() int {
	n := 0
	var buf [8]uint32
	for _, s := range ix.retired[ix.retiredHead:] {
		for k := range s.keys {
			sh := ix.shardOf(k)
			sh.mu.RLock()
			ids := sh.appendTo(sh.m[k], buf[:0])
			sh.mu.RUnlock()
			if len(ids) > 0 && ids[0] == s.id && !ix.anyLive(ids) {
				n++
			}
		}
	}
	return n
}

// anyLive reports whether any of the slots ids is live (not retired). Called with ix.mu
// held.
func (ix *Index) anyLive(ids []uint32) bool {
	for _, id := range ids {
		if ix.slotByID[id] != nil {
			return true
		}
	}
	return false
}
