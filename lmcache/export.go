package lmcache

import (
	"cmp"
	"slices"
)

// ExportBatchOps bounds the operations of one BatchedKVOperationMsg written by Export.
const ExportBatchOps = 2048

// Export writes the index's state as worker messages that rebuild it: applied in the
// order given, each group from its peer, to an empty index (ApplyFrames, or Apply), they
// reproduce every credited instance, its workers and their keys, each key's holders in
// the same order (so HolderRank is kept). Superseded instances are left out (their keys
// are gone); what is not kept: the keys' use order (the LRU restarts), full syncs in
// progress, and the heartbeat periods learned (relearned from the next heartbeats).
//
// emit is called with the writer lock held, so the export is one consistent state; it
// must not call the index, and it owns msgs. Export stops at emit's first error and
// returns it.
func (ix *Index) Export(emit func(peer string, msgs []Message) error) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.purge(-1) // the keys of retired slots are gone too: the key table is then exactly what is exported
	insts := make([]*instance, 0, len(ix.instances))
	for _, inst := range ix.instances {
		if !inst.superseded && inst.owner() != "" {
			insts = append(insts, inst)
		}
	}
	slices.SortFunc(insts, func(a, b *instance) int { return cmp.Compare(a.id, b.id) })
	for _, inst := range insts {
		if inst.ip == "" {
			continue // no registration to repeat: its admits recreate it
		}
		ids := make([]int, 0, len(inst.workers))
		for id := range inst.workers {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		msgs := make([]Message, 0, len(ids))
		for _, id := range ids {
			r := RegisterMsg{InstanceID: inst.id, WorkerID: id, IP: inst.ip, Port: inst.workers[id].port}
			if inst.heartbeats {
				msgs = append(msgs, HeartbeatMsg(r))
			} else {
				msgs = append(msgs, r)
			}
		}
		if err := emit(inst.owner(), msgs); err != nil {
			return err
		}
	}

	// byRank[r][slot] are the keys the slot holds in place r of their holder lists:
	// admitting rank by rank rebuilds every list in order.
	var byRank []map[uint32][]int64
	var hs []uint32
	for i := range ix.shards {
		sh := &ix.shards[i]
		sh.mu.RLock()
		for k, h := range sh.m {
			hs = sh.appendTo(h, hs[:0])
			for r, id := range hs {
				for len(byRank) <= r {
					byRank = append(byRank, map[uint32][]int64{})
				}
				byRank[r][id] = append(byRank[r][id], k)
			}
		}
		sh.mu.RUnlock()
	}
	for _, slots := range byRank {
		ids := make([]uint32, 0, len(slots))
		for id := range slots {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			s := ix.slotByID[id]
			if s == nil || s.w.inst.superseded || s.w.inst.owner() == "" {
				continue
			}
			keys := slots[id]
			slices.Sort(keys)
			var msgs []Message
			for len(keys) > 0 {
				n := min(len(keys), ExportBatchOps)
				ops := make([]KVOp, n)
				for j, k := range keys[:n] {
					ops[j] = KVOp{Op: OpAdmit, Key: k}
				}
				msgs = append(msgs, BatchedKVOperationMsg{InstanceID: s.w.inst.id, WorkerID: s.w.id, Location: s.loc, Operations: ops})
				keys = keys[n:]
			}
			if err := emit(s.w.inst.owner(), msgs); err != nil {
				return err
			}
		}
	}
	return nil
}
