package kvindex

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
			parent = ix.rootKey(Key{Adapter: ev.LoRAName, Salt: ev.Salt})
			if ev.HasParent {
				k, ok := s.engine.get(ev.Parent)
				if !ok {
					return
				}
				parent = k
			}
		}
		for i := next; i < end; i++ {
			parent = chain(parent, ix.root.Load(), ev.Tokens[i*bs:(i+1)*bs])
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
