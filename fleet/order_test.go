package fleet

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// leastByScan is Least's answer found the slow way: every place, sorted by InFlight and
// then place.
func leastByScan(v *View, n int, skip []uint64) ([]int32, int) {
	var all []int32
	sum := 0
	for i := range v.Addrs() {
		sum += v.InFlight(i)
		if i/64 < len(skip) && skip[i/64]&(1<<(i%64)) != 0 {
			continue
		}
		all = append(all, int32(i))
	}
	slices.SortFunc(all, func(a, b int32) int {
		return cmp.Or(cmp.Compare(v.InFlight(int(a)), v.InFlight(int(b))), cmp.Compare(a, b))
	})
	return all[:min(n, len(all))], sum
}

func TestLeast(t *testing.T) {
	addrs := []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1", "10.0.0.5:1"}
	for _, tc := range []struct {
		name   string
		loads  []int // own bookings per place
		remote map[int]int
		n      int
		skip   []uint64
		want   []int32
		sum    int
	}{
		{name: "all idle: by place", loads: []int{0, 0, 0, 0, 0}, n: 3, want: []int32{0, 1, 2}},
		{name: "by load, then place", loads: []int{2, 0, 1, 0, 2}, n: 5, want: []int32{1, 3, 2, 0, 4}, sum: 5},
		{name: "fewer asked", loads: []int{2, 0, 1, 0, 2}, n: 2, want: []int32{1, 3}, sum: 5},
		{name: "more asked than there are", loads: []int{1, 0, 0, 0, 0}, n: 9, want: []int32{1, 2, 3, 4, 0}, sum: 1},
		{name: "skipped places", loads: []int{2, 0, 1, 0, 2}, n: 3, skip: []uint64{1<<1 | 1<<2}, want: []int32{3, 0, 4}, sum: 5},
		{name: "none asked", loads: []int{1, 2, 3, 4, 5}, n: 0, want: nil, sum: 15},
		{name: "other pickers' loads count", loads: []int{0, 0, 0, 0, 0}, remote: map[int]int{0: 3, 2: 1}, n: 5, want: []int32{1, 3, 4, 2, 0}, sum: 4},
		{name: "loads past the buckets", loads: []int{0, 1, 0, 0, 0}, remote: map[int]int{0: 5000, 2: 2000, 3: 2000}, n: 5, want: []int32{4, 1, 2, 3, 0}, sum: 9001},
		{name: "past the buckets, skipped", loads: []int{0, 0, 0, 0, 0}, remote: map[int]int{0: 5000, 2: 2000}, n: 5, skip: []uint64{1 << 2}, want: []int32{1, 3, 4, 0}, sum: 7000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			s.Update(addrs)
			for i, n := range tc.loads {
				for range n {
					if _, err := s.Book(addrs[i]); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, r := range tc.remote {
				s.SetRemote(addrs[i], r/2, r-r/2)
			}
			v := s.View()
			q := LeastQuery{N: tc.n, Skip: tc.skip, Of: []int32{4, 0}}
			ok := v.Least(&q)
			var loads []int
			for _, i := range append([]int32{4, 0}, tc.want...) {
				loads = append(loads, v.InFlight(int(i)))
			}
			if !ok || !slices.Equal(q.Places, tc.want) || q.Sum != tc.sum || !slices.Equal(q.Loads, loads) {
				t.Errorf("Least(%d) = %v, loads %v, sum %d, ok %v; want %v, loads %v, sum %d", tc.n, q.Places, q.Loads, q.Sum, ok, tc.want, loads, tc.sum)
			}
		})
	}
}

// Least answers for the current View only.
func TestLeastOfAnOlderView(t *testing.T) {
	s := New()
	q := LeastQuery{N: 1, Places: []int32{9}}
	if ok := s.View().Least(&q); ok || len(q.Places) != 0 {
		t.Fatalf("a new set's empty view: Least = %v, %v; want nothing, not ok", q.Places, ok)
	}
	s.Update([]string{"10.0.0.1:1", "10.0.0.2:1"})
	old := s.View()
	s.Update([]string{"10.0.0.2:1", "10.0.0.3:1"})
	q = LeastQuery{N: 2, Of: []int32{1}}
	if ok := old.Least(&q); ok || len(q.Places)+len(q.Loads) != 0 {
		t.Errorf("an older view: Least = %v, loads %v, %v; want nothing, not ok", q.Places, q.Loads, ok)
	}
	if ok := s.View().Least(&q); !ok || !slices.Equal(q.Places, []int32{0, 1}) || !slices.Equal(q.Loads, []int{0, 0, 0}) {
		t.Errorf("the current view: Least = %v, loads %v, %v; want [0 1], [0 0 0], ok", q.Places, q.Loads, ok)
	}
}

// Random bookings, releases, first tokens, other pickers' counts and endpoint-set
// changes, checked after each step against a scan of the loads: the order never drifts.
func TestLeastFollowsEveryChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]string, 150)
	for i := range pool {
		pool[i] = fmt.Sprintf("10.0.%d.%d:8000", i/100, i%100)
	}
	s := New()
	s.Update(pool[:100])
	var bookings []*Booking
	for step := range 4000 {
		v := s.View()
		addrs := v.Addrs()
		switch r := rng.IntN(100); {
		case r < 45:
			b, err := s.Book(addrs[rng.IntN(len(addrs))])
			if err != nil {
				t.Fatal(err)
			}
			bookings = append(bookings, b)
		case r < 80 && len(bookings) > 0:
			j := rng.IntN(len(bookings))
			if rng.IntN(3) == 0 {
				bookings[j].Decoding()
				continue
			}
			bookings[j].Release()
			bookings = slices.Delete(bookings, j, j+1)
		case r < 95:
			big := 0
			if rng.IntN(10) == 0 {
				big = maxOrdered
			}
			s.SetRemote(addrs[rng.IntN(len(addrs))], rng.IntN(5)+big, rng.IntN(5))
		default: // a new endpoint set: some leave (their bookings then count nothing), some come
			next := slices.Clone(pool)
			rng.Shuffle(len(next), func(i, j int) { next[i], next[j] = next[j], next[i] })
			s.Update(next[:60+rng.IntN(90)])
		}
		v = s.View()
		n := rng.IntN(len(v.Addrs()) + 2)
		skip := make([]uint64, (len(v.Addrs())+63)/64)
		for range rng.IntN(20) {
			i := rng.IntN(len(v.Addrs()))
			skip[i/64] |= 1 << (i % 64)
		}
		q := LeastQuery{N: n, Skip: skip}
		for range rng.IntN(5) {
			q.Of = append(q.Of, int32(rng.IntN(len(v.Addrs()))))
		}
		ok := v.Least(&q)
		want, wantSum := leastByScan(v, n, skip)
		var loads []int
		for _, i := range append(slices.Clone(q.Of), want...) {
			loads = append(loads, v.InFlight(int(i)))
		}
		if !ok || !slices.Equal(q.Places, want) || q.Sum != wantSum || !slices.Equal(q.Loads, loads) {
			t.Fatalf("step %d: Least(%d) = %v loads %v sum %d ok %v; a scan of the loads gives %v loads %v sum %d", step, n, q.Places, q.Loads, q.Sum, ok, want, loads, wantSum)
		}
	}
}

// Concurrent bookings, releases and endpoint-set changes leave the order exactly on the
// loads once they stop: no change is lost or counted twice across an Update.
func TestLeastUnderConcurrentChanges(t *testing.T) {
	pool := make([]string, 40)
	for i := range pool {
		pool[i] = fmt.Sprintf("10.0.0.%d:8000", i+1)
	}
	s := New()
	s.Update(pool[:30])
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			var held []*Booking
			for range 3000 {
				addrs := s.View().Addrs()
				if b, err := s.Book(addrs[rng.IntN(len(addrs))]); err == nil {
					held = append(held, b)
				}
				if len(held) > 5 && rng.IntN(2) == 0 {
					held[0].Decoding()
					held[0].Release()
					held = held[1:]
				}
				if rng.IntN(50) == 0 {
					s.SetRemote(addrs[rng.IntN(len(addrs))], rng.IntN(3), rng.IntN(3))
				}
			}
		})
	}
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for range 200 {
			next := slices.Clone(pool)
			rng.Shuffle(len(next), func(i, j int) { next[i], next[j] = next[j], next[i] })
			s.Update(next[:20+rng.IntN(20)])
		}
	})
	wg.Wait()
	v := s.View()
	q := LeastQuery{N: len(v.Addrs())}
	ok := v.Least(&q)
	want, wantSum := leastByScan(v, len(v.Addrs()), nil)
	if !ok || !slices.Equal(q.Places, want) || q.Sum != wantSum {
		t.Fatalf("after concurrent changes: Least = %v sum %d; a scan gives %v sum %d", q.Places, q.Sum, want, wantSum)
	}
}

// BenchmarkLeast is the order's cost to a decision at 10k endpoints: the few least loaded
// with every third place skipped (the holders a decision scores on their own).
func BenchmarkLeast(b *testing.B) {
	addrs := make([]string, 10000)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d:8000", i>>16&255, i>>8&255, i&255)
	}
	s := New()
	s.Update(addrs)
	for i, a := range s.View().Addrs() {
		for range i % 4 {
			if _, err := s.Book(a); err != nil {
				b.Fatal(err)
			}
		}
	}
	skip := make([]uint64, (len(addrs)+63)/64)
	for i := 0; i < len(addrs); i += 3 {
		skip[i/64] |= 1 << (i % 64)
	}
	v := s.View()
	q := LeastQuery{N: 9, Skip: skip}
	for b.Loop() {
		v.Least(&q)
	}
}

// BenchmarkBookRelease is a booking and its release on a 256-endpoint set, from every
// core at once: what the load order's lock adds to each request.
func BenchmarkBookRelease(b *testing.B) {
	addrs := make([]string, 256)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.0.%d.%d:8000", i/256, i%256)
	}
	s := New()
	s.Update(addrs)
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			bk, err := s.Book(addrs[i%len(addrs)])
			if err != nil {
				b.Error(err)
				return
			}
			bk.Decoding()
			bk.Release()
			i += 7
		}
	})
}
