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

// A View counts what other pickers booked (SetRemote), as Loads does: a replica's
// decisions, which read loads through the View, must see every replica's requests.
func TestViewCountsOtherPickersLoads(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.1:1", "10.0.0.2:1"})
	if _, err := s.Book("10.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	s.SetRemote("10.0.0.1:1", 2, 5)
	v := s.View()
	if got := v.InFlight(0); got != 8 {
		t.Errorf("InFlight = %d, want 1 own + 7 remote", got)
	}
	if got, want := v.Load(0), s.Loads([]string{"10.0.0.1:1"})[0]; got != want {
		t.Errorf("View.Load = %+v, Loads = %+v: they must agree", got, want)
	}
	if got := v.Load(0); got.Prefill != 3 || got.Decode != 5 {
		t.Errorf("View.Load = %+v, want prefill 3, decode 5", got)
	}
}
