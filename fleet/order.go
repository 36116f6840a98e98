package fleet

import (
	"cmp"
	"math/bits"
	"slices"
)

// The load order: the current View's endpoints kept ordered by load as bookings come and
// go, so that a decision can take the least loaded few (View.Least) and the mean load
// without reading every endpoint. Every change to an endpoint's whole load (a booking, a
// release, another picker's count) moves it in the order under Set.orderMu, and the
// order counts its own copy of each load, so it never drifts from the sum of the changes
// it was told of, whatever their interleaving with an Update.

// maxOrdered is the load from which endpoints are kept unordered (order.over) instead of
// in a bucket of their own: a fleet whose endpoints each hold a thousand requests or more
// is not one a few least-loaded endpoints are looked for in often.
const maxOrdered = 1024

// order is one View's endpoints by load. Its zero value is an empty order.
type order struct {
	level   []int64    // place -> its whole load as the order counts it
	sum     int64      // of level
	buckets [][]uint64 // load -> bitmap of the places at it; nil until a place first has it
	count   []int32    // load -> how many places are at it
	over    []int32    // places at maxOrdered or more, unordered
}

// newOrder returns the order of places 0..len(levels)-1 at the given loads.
func newOrder(levels []int64) *order {
	o := &order{level: levels}
	for i, l := range levels {
		o.sum += l
		o.insert(int32(i), l)
	}
	return o
}

func (o *order) words() int { return (len(o.level) + 63) / 64 }

func (o *order) insert(i int32, l int64) {
	if l >= maxOrdered {
		o.over = append(o.over, i)
		return
	}
	b := int(max(l, 0))
	if b >= len(o.buckets) {
		o.buckets = slices.Grow(o.buckets, b+1-len(o.buckets))[:b+1]
		o.count = slices.Grow(o.count, b+1-len(o.count))[:b+1]
	}
	if o.buckets[b] == nil {
		o.buckets[b] = make([]uint64, o.words())
	}
	o.buckets[b][i/64] |= 1 << (i % 64)
	o.count[b]++
}

func (o *order) remove(i int32, l int64) {
	if l >= maxOrdered {
		if j := slices.Index(o.over, i); j >= 0 {
			o.over[j] = o.over[len(o.over)-1]
			o.over = o.over[:len(o.over)-1]
		}
		return
	}
	b := int(max(l, 0))
	o.buckets[b][i/64] &^= 1 << (i % 64)
	o.count[b]--
}

// shift moves place i by delta.
func (o *order) shift(i int32, delta int64) {
	if delta == 0 {
		return
	}
	l := o.level[i]
	o.remove(i, l)
	o.level[i] = l + delta
	o.sum += delta
	o.insert(i, l+delta)
}

// least appends to dst, up to n, the places not in skip (a bitmap over places; nil or
// short: none skipped) in ascending order of load, places at one load ascending.
func (o *order) least(n int, skip []uint64, dst []int32) []int32 {
	start := len(dst)
	for b := 0; b < len(o.buckets) && len(dst)-start < n; b++ {
		if o.count[b] == 0 {
			continue
		}
		for w, word := range o.buckets[b] {
			if w < len(skip) {
				word &^= skip[w]
			}
			for word != 0 && len(dst)-start < n {
				dst = append(dst, int32(w*64+bits.TrailingZeros64(word)))
				word &= word - 1
			}
			if len(dst)-start == n {
				return dst
			}
		}
	}
	if len(dst)-start < n && len(o.over) > 0 {
		over := slices.Clone(o.over)
		slices.SortFunc(over, func(a, b int32) int {
			return cmp.Or(cmp.Compare(o.level[a], o.level[b]), cmp.Compare(a, b))
		})
		for _, i := range over {
			if len(dst)-start == n {
				break
			}
			if int(i/64) < len(skip) && skip[i/64]&(1<<(i%64)) != 0 {
				continue
			}
			dst = append(dst, i)
		}
	}
	return dst
}

// moved tells the set's order that e's whole load changed by delta (e has already
// changed its counters). An endpoint that has left the set only counts it.
func (e *endpoint) moved(delta int64) {
	e.set.orderMu.Lock()
	e.movedLocked(delta)
	e.set.orderMu.Unlock()
}

// movedLocked is moved with Set.orderMu held.
func (e *endpoint) movedLocked(delta int64) {
	e.level += delta
	if e.place >= 0 {
		e.set.order.shift(e.place, delta)
	}
}

// LeastQuery is one look at the current View's load order (View.Least). The caller sets
// N, Skip and Of; Least fills the rest, appending to the slices' memory given.
type LeastQuery struct {
	N    int      // how many of the least loaded endpoints to find
	Skip []uint64 // places they are not taken from: bit i%64 of word i/64 marks place i; nil: none
	Of   []int32  // places whose loads are wanted as well

	Places []int32 // up to N places not in Skip, least loaded first and, at one load, by place
	Loads  []int   // the loads of Of, in order, then of Places
	Sum    int     // every endpoint's load, summed
}

// Least answers q for v: the least loaded endpoints, the loads of q.Of and the sum of
// every load, all as of one instant (loads as InFlight counts them: this picker's own
// and the other pickers'). It reports false, leaving q's answers empty, when v is no
// longer the set's current View: the order is kept for the current View only.
//
// It costs the places asked about and the bitmap words read to find the least loaded,
// not the fleet, and holds the set's order lock (which bookings and releases take) while
// it runs. A booking change is seen here once it is complete: InFlight may see a
// concurrent one a moment earlier.
func (v *View) Least(q *LeastQuery) bool {
	q.Places, q.Loads, q.Sum = q.Places[:0], q.Loads[:0], 0
	s := v.set
	if s == nil { // the empty View of a new Set
		return false
	}
	s.orderMu.Lock()
	defer s.orderMu.Unlock()
	if s.order != v.ord {
		return false
	}
	o := v.ord
	q.Places = o.least(q.N, q.Skip, q.Places)
	for _, i := range q.Of {
		q.Loads = append(q.Loads, int(o.level[i]))
	}
	for _, i := range q.Places {
		q.Loads = append(q.Loads, int(o.level[i]))
	}
	q.Sum = int(o.sum)
	return true
}
