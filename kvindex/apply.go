package kvindex

import "strings"

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
	OutRemote         = "refused_remote"
	OutUnknownLocal   = "refused_unknown_locality"
	OutOwners         = "refused_too_many_owners"
)

// tier returns the tier a store or removal of ev applies to, or the outcome that
// refuses it: an unknown medium or locality (fail closed), or a REMOTE block the
// policy does not credit (a REMOTE GPU block is never the publisher's GPU).
func (ix *Index) tier(ev *Event) (Medium, string) {
	med, ok := ParseMedium(ev.Medium)
	if !ok {
		return 0, OutUnknownMedium
	}
	loc, ok := ParseLocality(ev.Locality)
	switch {
	case !ok:
		return 0, OutUnknownLocal
	case loc == Remote && (ix.remote == RemoteRefuse || med == GPU):
		return 0, OutRemote
	}
	return med, ""
}

// Apply applies the events of one batch published by endpoint (the batch's
// DPRank names the stream). Each block's outcome is counted in the metrics; refused
// blocks are left out of the index, so an endpoint is never credited for a block it may
// not hold.
func (ix *Index) Apply(endpoint string, b Batch) {
	ix.batchMu.RLock()
	defer ix.batchMu.RUnlock()
	id := streamID{endpoint, b.DPRank}
	for i := range b.Events {
		ix.applyEvent(id, &b.Events[i])
	}
	ix.mu.Lock()
	if s := ix.streams[id]; s != nil {
		s.seq = b.Seq
	}
	ix.mu.Unlock()
}

func (ix *Index) applyEvent(id streamID, ev *Event) {
	ix.m.events.WithLabelValues(ev.Kind.String()).Inc()
	if ev.Kind != AllBlocksCleared {
		if med, out := ix.tier(ev); out == "" {
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
	med, out := ix.tier(ev)
	if out != "" {
		// A refused tier was never stored, so nothing of it is removed (a REMOTE copy's
		// removal leaves the publisher's own copy of the block in the same tier).
		ix.m.count(out, len(ev.Hashes))
		return
	}
	owner, ok := ix.ownerBit(ev.Ownership)
	if !ok {
		ix.m.count(OutOwners, len(ev.Hashes))
		return
	}
	if s != nil && owner != ownBit {
		s.owned = true
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
		ix.release(med, s, key, owner)
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
	med, out := ix.tier(ev)
	switch {
	case out != "":
		refuse(out)
		return
	case ev.LoRAID != 0 && ev.LoRAName == "", ev.LoRAName != "" && !ix.extras:
		// An adapter known by id only (vLLM before lora_name) cannot be matched to a
		// request's adapter name.
		refuse(OutLoRA)
		return
	case ev.ExtraKeys, ev.Salt != "" && !ix.extras:
		refuse(OutExtraKeys)
		return
	case ev.Group != 0:
		refuse(OutGroup)
		return
	case ev.SpecKind != "" && !strings.Contains(strings.ToLower(ev.SpecKind), "full"):
		refuse(OutSpecKind)
		return
	}
	owner, ok := ix.ownerBit(ev.Ownership)
	if !ok {
		refuse(OutOwners)
		return
	}
	s := ix.streams[id]
	if s != nil && owner != ownBit {
		s.owned = true
	}
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
			ix.hold(med, s, key, owner)
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
	parent := ix.rootKey(Key{Adapter: ev.LoRAName, Salt: ev.Salt})
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
	s.owned = s.owned || owner != ownBit
	for i, h := range ev.Hashes {
		if i > 0 && i%lockSpan == 0 && !ix.yield(id, s, ev, med, i, parent) {
			ix.m.count(OutStored, i)
			ix.m.count(OutUnknownParent, n-i)
			return
		}
		key := chain(parent, ix.root.Load(), ev.Tokens[i*bs:(i+1)*bs])
		had := s.engine.Len()
		s.engine.put(h, key)
		if i == 0 && !ev.HasParent {
			// The store order before the block: a lookup that sees the block held finds it.
			if _, had := ix.stamps.get(pair(key, s.salt)); !had {
				ix.stamp++
				ix.stamps.put(pair(key, s.salt), ix.stamp)
			}
		}
		ix.hold(med, s, key, owner)
		if s.engine.Len() > had && !ix.noteStored(s, h) { // after the hold: a block over the budget is dropped whole
			ix.m.count(OutStored, i+1)
			ix.m.count(OutUnknownParent, n-i-1)
			return
		}
		parent = key
	}
	ix.m.count(OutStored, n)
}
