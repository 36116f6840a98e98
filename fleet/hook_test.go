package fleet

import "testing"

type countHook struct{ decoding, released int }

func (h *countHook) Decoding() { h.decoding++ }
func (h *countHook) Released() { h.released++ }

// A hook hears the first Decoding and the one Release that count, and nothing once taken.
func TestBookingHook(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.1:1"})
	b, err := s.Book("10.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	h := &countHook{}
	b.SetHook(h)
	b.Decoding()
	b.Decoding()
	b.Release()
	b.Release()
	if h.decoding != 1 || h.released != 1 {
		t.Fatalf("hook heard %d decodings and %d releases; want 1 and 1", h.decoding, h.released)
	}
	b2, err := s.Book("10.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	h2 := &countHook{}
	b2.SetHook(h2)
	if got := b2.TakeHook(); got != h2 || b2.TakeHook() != nil {
		t.Fatalf("TakeHook = %v, then not nil; want the hook once", got)
	}
	b2.Release()
	if h2.released != 0 {
		t.Fatal("a taken hook heard the release")
	}
}
