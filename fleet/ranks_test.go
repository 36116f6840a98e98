package fleet

import (
	"slices"
	"testing"
)

// PinsSince counts the pins on each rank since the stamp was first passed, restarts at a
// new stamp, and counts a pin made after a release nothing.
func TestPinsSinceCountsFromTheStamp(t *testing.T) {
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
	steps := []struct {
		name  string
		stamp int64
		pins  []int // ranks pinned before the call
		want  []int
	}{
		{"a first stamp counts from now", 10, nil, []int{0, 0, 0}},
		{"pins since under the same stamp", 10, []int{1, 1, 2}, []int{0, 2, 1}},
		{"a new stamp restarts", 20, nil, []int{0, 0, 0}},
		{"and counts again", 20, []int{0}, []int{1, 0, 0}},
		{"an older stamp is a new one too", 10, []int{2}, []int{0, 0, 0}},
	}
	for _, st := range steps {
		for _, r := range st.pins {
			defer pin(r).Release()
		}
		got := first.PinsSince(3, st.stamp, []int{-1})
		if !slices.Equal(got, append([]int{-1}, st.want...)) {
			t.Errorf("%s: PinsSince = %v, want -1 then %v", st.name, got, st.want)
		}
	}
	gone, err := s.Book(ep)
	if err != nil {
		t.Fatal(err)
	}
	gone.Release()
	if err := gone.Pin(1, 3); err != nil {
		t.Fatal(err)
	}
	if got := first.PinsSince(3, 10, nil); !slices.Equal(got, []int{0, 0, 0}) {
		t.Errorf("a released booking's pin counted: %v", got)
	}
}

// An endpoint nothing was pinned to reports no pins, and allocates nothing with room.
func TestPinsSinceWithoutATable(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.2:8000"})
	b, err := s.Book("10.0.0.2:8000")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release()
	dst := make([]int, 0, 4)
	if n := testing.AllocsPerRun(50, func() { dst = b.PinsSince(4, 1, dst[:0]) }); n != 0 {
		t.Errorf("PinsSince allocates %.0f times", n)
	}
	if !slices.Equal(dst, []int{0, 0, 0, 0}) {
		t.Errorf("PinsSince = %v, want zeros", dst)
	}
}
