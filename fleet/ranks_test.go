package fleet

import (
	"slices"
	"testing"
)

// RanksAt keeps the ranks' loads as they were when a stamp was first passed, and takes
// them anew at another stamp.
func TestRanksAtKeepsTheLoadsOfTheStamp(t *testing.T) {
	const ep = "10.0.0.2:8000"
	s := New()
	s.Update([]string{ep})
	pin := func(rank int) *Booking {
		t.Helper()
		b, err := s.Book(ep)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Pin(rank, 3); err != nil {
			t.Fatal(err)
		}
		return b
	}
	first := pin(0)
	defer first.Release()
	second := pin(1)
	steps := []struct {
		name  string
		stamp int64
		edit  func()
		want  []int // each rank's InFlight
	}{
		{"a first stamp takes now", 10, func() {}, []int{1, 1, 0}},
		{"the same stamp keeps them", 10, func() { defer pin(2).Release(); second.Release() }, []int{1, 1, 0}},
		{"a new stamp takes now", 20, func() {}, []int{1, 0, 0}},
		{"an older stamp is a new one too", 10, func() { pin(2) }, []int{1, 0, 1}},
	}
	for _, st := range steps {
		st.edit()
		got := first.RanksAt(3, st.stamp, []Load{{}})
		var flight []int
		for _, l := range got[1:] {
			flight = append(flight, l.InFlight())
		}
		if len(got) != 4 || got[0] != (Load{}) || !slices.Equal(flight, st.want) {
			t.Errorf("%s: RanksAt = %v, want {} then in flight %v", st.name, got, st.want)
		}
	}
}

// An endpoint nothing was pinned to has no load at any stamp, and allocates nothing with
// room.
func TestRanksAtWithoutATable(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.2:8000"})
	b, err := s.Book("10.0.0.2:8000")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	dst := make([]Load, 0, 4)
	if n := testing.AllocsPerRun(50, func() { dst = b.RanksAt(4, 1, dst[:0]) }); n != 0 {
		t.Errorf("RanksAt allocates %.0f times", n)
	}
	if len(dst) != 4 || dst[3].InFlight() != 0 || dst[3].Addr != "10.0.0.2:8000" {
		t.Errorf("RanksAt = %v, want 4 empty loads of the endpoint", dst)
	}
}
