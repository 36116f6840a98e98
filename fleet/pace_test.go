package fleet

import (
	"testing"
	"time"
)

// fakeClock is a settable clock for the pace tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestDecodePaceIsMeasuredFromBookings(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	s := New()
	s.Update([]string{"10.0.0.1:8000", "10.0.0.2:8000"})
	s.SetClock(clk.now)
	run := func(addr string, ttft, decode time.Duration) {
		b, err := s.Book(addr)
		if err != nil {
			t.Fatal(err)
		}
		clk.t = clk.t.Add(ttft)
		b.Decoding()
		clk.t = clk.t.Add(decode)
		b.Release()
	}
	run("10.0.0.1:8000", 100*time.Millisecond, 2*time.Second)
	run("10.0.0.1:8000", 300*time.Millisecond, 4*time.Second)
	ls := s.All()
	if got, want := ls[0].DecodePace, 3*time.Second; got != want {
		t.Errorf("decode pace %v, want the mean of two, %v", got, want)
	}
	if ls[1].DecodePace != 0 {
		t.Errorf("an endpoint without requests has pace %v, want 0 (unmeasured)", ls[1].DecodePace)
	}
}

func TestPaceFollowsRecentRequests(t *testing.T) {
	var p pace
	for range 200 {
		p.observe(time.Second)
	}
	for range 200 {
		p.observe(3 * time.Second)
	}
	if m := p.mean(); m < 2900*time.Millisecond || m > 3*time.Second {
		t.Errorf("after 200 samples of 3 s the pace is %v: it must follow the recent ones", m)
	}
	p.observe(-time.Second)
	if m := p.mean(); m < 2900*time.Millisecond {
		t.Errorf("a negative duration moved the pace to %v: it must be ignored", m)
	}
}

func TestNoPaceWithoutAClock(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.1:8000"})
	b, _ := s.Book("10.0.0.1:8000")
	b.Decoding()
	b.Release()
	if l := s.All()[0]; l.DecodePace != 0 || l.InFlight() != 0 {
		t.Errorf("without a clock: %+v, want no pace and nothing in flight", l)
	}
}
