package fleet

import (
	"fmt"
	"sync/atomic"
)

// rankLoad is one data-parallel rank's share of an endpoint's bookings.
type rankLoad struct {
	prefill, decode atomic.Int64
	// markPrefill and markDecode are prefill and decode when the endpoint's rankStamp was
	// last set (Booking.RanksAt).
	markPrefill, markDecode atomic.Int64
}

func (r *rankLoad) release(inPrefill bool) {
	if inPrefill {
		r.prefill.Add(-1)
	} else {
		r.decode.Add(-1)
	}
}

// MaxRanks bounds the data-parallel size Pin accepts: vLLM's largest documented
// deployments run 64 ranks (wide expert parallelism); 1024 leaves room without letting a
// bad value allocate without bound.
const MaxRanks = 1024

// Pin counts the booking on data-parallel rank rank of the ranks behind its endpoint
// (vLLM's x-data-parallel-rank), besides the endpoint's whole load: Ranks then shows it
// there until its Release. It is for an endpoint serving ranks data-parallel ranks
// behind one port; every Pin on one endpoint must pass the same ranks (the first one
// sizes its table). Like SetHook, it is not synchronised with Decoding and Release: pin
// before the booking is handed to whoever calls them. A booking is pinned at most once;
// Pin fails on a second call, on a rank out of [0, ranks), or on ranks over MaxRanks.
func (b *Booking) Pin(rank, ranks int) error {
	if ranks < 1 || ranks > MaxRanks || rank < 0 || rank >= ranks {
		return fmt.Errorf("fleet: rank %d of %d data-parallel ranks: want 0 <= rank < ranks <= %d", rank, ranks, MaxRanks)
	}
	if b.rank != nil {
		return fmt.Errorf("fleet: the booking on %s is pinned already", b.ep.addr)
	}
	t := b.ep.ranks.Load()
	if t == nil {
		fresh := make([]rankLoad, ranks)
		if !b.ep.ranks.CompareAndSwap(nil, &fresh) {
			t = b.ep.ranks.Load()
		} else {
			t = &fresh
		}
	}
	if rank >= len(*t) {
		return fmt.Errorf("fleet: rank %d on %s, which was pinned with %d data-parallel ranks", rank, b.ep.addr, len(*t))
	}
	r := &(*t)[rank]
	switch b.state.Load() {
	case inPrefill:
		r.prefill.Add(1)
	case inDecode:
		r.decode.Add(1)
	default:
		return nil // released: nothing to count
	}
	b.rank = r
	return nil
}

// Ranks appends to dst the loads of the first n data-parallel ranks of the booked
// endpoint (Addr set to the endpoint's), as the pinned bookings count them: rank r is
// dst[len(dst)+r]. A rank nothing was pinned to has no load. It counts this picker's
// bookings only (what other replicas booked is known per endpoint, not per rank), and
// allocates nothing when dst has room.
func (b *Booking) Ranks(n int, dst []Load) []Load {
	t := b.ep.ranks.Load()
	for r := range n {
		l := Load{Addr: b.ep.addr}
		if t != nil && r < len(*t) {
			l.Prefill, l.Decode = int((*t)[r].prefill.Load()), int((*t)[r].decode.Load())
		}
		dst = append(dst, l)
	}
	return dst
}

// RanksAt appends to dst the loads of the first n data-parallel ranks of the booked
// endpoint as Ranks showed them when stamp was first passed for it: a stamp other than
// the last one passed takes the loads of now. The stamp names a scrape of the engine's
// per-rank counts (its time), so the result is this picker's share of what that scrape
// counted, and Ranks less it is how this picker's share moved since. Calls for one
// endpoint must not race each other (the picker's decide lock serialises them); it
// allocates nothing when dst has room.
func (b *Booking) RanksAt(n int, stamp int64, dst []Load) []Load {
	t := b.ep.ranks.Load()
	restart := b.ep.rankStamp.Swap(stamp) != stamp
	for r := range n {
		l := Load{Addr: b.ep.addr}
		if t != nil && r < len(*t) {
			rl := &(*t)[r]
			if restart {
				rl.markPrefill.Store(rl.prefill.Load())
				rl.markDecode.Store(rl.decode.Load())
			}
			l.Prefill, l.Decode = int(rl.markPrefill.Load()), int(rl.markDecode.Load())
		}
		dst = append(dst, l)
	}
	return dst
}
