package fleet

import (
	"slices"
	"testing"
)

// A View is the set as of one Update: the same until the next, with live loads.
func TestViewFollowsUpdatesAndLoads(t *testing.T) {
	s := New()
	if v := s.View(); len(v.Addrs()) != 0 {
		t.Fatalf("a new set's view has %v", v.Addrs())
	}
	s.Update([]string{"10.0.0.2:1", "10.0.0.1:1"})
	v := s.View()
	if v != s.View() {
		t.Fatal("two calls without an Update gave different views")
	}
	if !slices.Equal(v.Addrs(), []string{"10.0.0.1:1", "10.0.0.2:1"}) {
		t.Fatalf("addrs %v, want sorted", v.Addrs())
	}
	b, err := s.Book("10.0.0.2:1")
	if err != nil {
		t.Fatal(err)
	}
	b.Decoding()
	if _, err := s.Book("10.0.0.2:1"); err != nil {
		t.Fatal(err)
	}
	if got := []int{v.InFlight(0), v.InFlight(1)}; !slices.Equal(got, []int{0, 2}) {
		t.Fatalf("in flight %v, want [0 2]", got)
	}
	s.Update([]string{"10.0.0.2:1"})
	if w := s.View(); w == v || !slices.Equal(w.Addrs(), []string{"10.0.0.2:1"}) || w.InFlight(0) != 2 {
		t.Fatalf("after an Update: same view %v, addrs %v", w == v, w.Addrs())
	}
	if !slices.Equal(v.Addrs(), []string{"10.0.0.1:1", "10.0.0.2:1"}) {
		t.Fatal("an Update changed an older view")
	}
}
