package fleet

import "math"

// Listener is told of every change a Booking makes to this picker's own counts, after it
// is made: the feed of booking deltas other pickers apply (package replica). Its methods
// are called on the booking's goroutine and must be fast and must not block.
type Listener interface {
	Booked(addr string, tag uint64)      // one request booked in prefill, with BookTagged's tag (0 from Book)
	Decoding(addr string)                // one request moved from prefill to decode
	Released(addr string, decoding bool) // one request ended, in decode when decoding
}

type listenerBox struct{ l Listener }

// SetListener installs l (nil removes it). Bookings made before keep the listener they
// were made with, so every booked request reports its release to the same listener.
func (s *Set) SetListener(l Listener) {
	if l == nil {
		s.listener.Store(nil)
		return
	}
	s.listener.Store(&listenerBox{l: l})
}

// SetRemote sets what other pickers have in flight on addr (negative values count as 0);
// Loads adds it to this picker's own bookings. It does nothing when addr is not in the set.
func (s *Set) SetRemote(addr string, prefill, decode int) {
	s.mu.RLock()
	e, ok := s.eps[addr]
	s.mu.RUnlock()
	if ok {
		v := packRemote(prefill, decode)
		s.orderMu.Lock()
		old := e.remote.Swap(v)
		e.movedLocked(remoteTotal(v) - remoteTotal(old))
		s.orderMu.Unlock()
	}
}

// remoteTotal is the whole load of a packed remote count.
func remoteTotal(v uint64) int64 { return int64(v>>32) + int64(uint32(v)) }

// LocalLoads is Loads without the other pickers' share: this picker's own bookings only.
func (s *Set) LocalLoads(addrs []string) []Load {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Load, 0, len(addrs))
	for _, a := range addrs {
		if e, ok := s.eps[a]; ok {
			out = append(out, Load{Addr: a, Prefill: int(e.prefill.Load()), Decode: int(e.decode.Load())})
		}
	}
	return out
}

func packRemote(prefill, decode int) uint64 {
	clamp := func(v int) uint64 { return uint64(min(max(v, 0), math.MaxInt32)) }
	return clamp(prefill)<<32 | clamp(decode)
}

func unpackRemote(v uint64) (prefill, decode int) { return int(v >> 32), int(uint32(v)) }
