package lmcache

import (
	"slices"
	"time"
)

// evictFraction is the share of MaxKeys dropped when the index goes over it, so the scan
// that finds the least recently used keys runs once per that many admits.
const evictFraction = 10

// touchSlack bounds how stale (in clock ticks) a key's use stamp may get before a lookup
// renews it: lookups take a shard's write lock only for keys not used that recently, so hot
// prefixes are read-locked only. The slack used is at most a fortieth of the budget, a
// quarter of what one eviction round drops.
const touchSlack = 1024

// touchSlack returns the slack in force; 0 without a budget (nothing is evicted, use stamps
// are not needed).
func (ix *Index) touchSlack() uint32 {
	if ix.maxKeys <= 0 {
		return 0
	}
	return uint32(min(touchSlack, max(1, ix.maxKeys/(4*evictFraction))))
}

// renew marks the keys whose bit is set in stale (a lookup credited them, and their stamps
// were older than the slack) as used now.
func (ix *Index) renew(keys []int64, stale uint64) {
	tick := ix.tick.Add(1)
	for i, k := range keys {
		if i >= 64 || stale&(1<<i) == 0 {
			continue
		}
		sh := ix.shardOf(k)
		sh.mu.Lock()
		if h, ok := sh.m[k]; ok {
			h.used = tick
			sh.m[k] = h
		}
		sh.mu.Unlock()
	}
}

// enforceBudget drops the least recently used keys while the index holds more than
// maxKeys, down to 90% of it. Called with ix.mu held, after a batch.
//
// Keys of retired slots (see purge) are purged first, so that they never cost a live key
// its place.
func (ix *Index) enforceBudget(now time.Time) {
	if ix.maxKeys <= 0 || ix.nkeys.Load() <= ix.maxKeys {
		return
	}
	if ix.purge(-1); ix.nkeys.Load() <= ix.maxKeys {
		return
	}
	target := ix.nkeys.Load() - ix.maxKeys + ix.maxKeys/evictFraction
	// The threshold: the target-th smallest use stamp. The clock is a uint32 counter;
	// compare by distance from now so that a wrap does not invert the order.
	clock := ix.tick.Load()
	ages := make([]uint32, 0, ix.nkeys.Load())
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.RLock()
		for _, h := range sh.m {
			ages = append(ages, clock-h.used)
		}
		sh.mu.RUnlock()
	}
	slices.Sort(ages)
	cut := ages[len(ages)-int(min(target, int64(len(ages))))] // evict ages >= cut, oldest first
	var victims []int64
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.RLock()
		for k, h := range sh.m {
			if clock-h.used >= cut && int64(len(victims)) < target {
				victims = append(victims, k)
			}
		}
		sh.mu.RUnlock()
	}
	var buf [8]uint32
	for _, k := range victims {
		sh := ix.shardOf(k)
		sh.mu.RLock()
		ids := sh.appendTo(sh.m[k], buf[:0])
		sh.mu.RUnlock()
		for _, id := range ids {
			if s := ix.slotByID[id]; s != nil {
				delete(s.keys, k)
			}
			ix.unhold(k, id)
		}
	}
	ix.trust.evicted.Add(float64(len(victims)))
	if !ix.suppressed("budget", now) {
		ix.log.Warn("lmcache: the index is over its key budget; dropped the least recently used chunks (raise --lmcache-max-keys if the pod has the memory; logged once a minute)",
			"dropped", len(victims), "budget", ix.maxKeys, "keys", ix.nkeys.Load())
	}
}
