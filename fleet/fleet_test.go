package fleet

import (
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseEndpoints(t *testing.T) {
	tests := []struct {
		name, in, want, wantErr string
	}{
		{"sorted and canonical", " 10.0.0.8:8000,10.0.0.7:8000 ", "10.0.0.7:8000,10.0.0.8:8000", ""},
		{"IPv6 in brackets", "[::1]:8000", "[::1]:8000", ""},
		{"IPv4-mapped IPv6 becomes IPv4", "[::ffff:10.0.0.1]:80", "10.0.0.1:80", ""},
		{"empty list says what to pass", "", "", "pass --endpoints"},
		{"host names are refused", "vllm-0:8000", "", "not an IP address"},
		{"missing port", "10.0.0.7", "", "not ip:port"},
		{"port out of range", "10.0.0.7:70000", "", "1 to 65535"},
		{"port zero", "10.0.0.7:0", "", "1 to 65535"},
		{"duplicates", "10.0.0.7:1,10.0.0.7:1", "", "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseEndpoints(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != tt.want {
				t.Fatalf("got %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

func TestBookingMovesThroughPhasesExactlyOnce(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.1:1", "10.0.0.2:1"})
	b, err := s.Book("10.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	check := func(step string, prefill, decode int) {
		t.Helper()
		l := s.Loads([]string{"10.0.0.1:1"})[0]
		if l.Prefill != prefill || l.Decode != decode {
			t.Fatalf("%s: prefill=%d decode=%d, want %d/%d", step, l.Prefill, l.Decode, prefill, decode)
		}
	}
	check("booked", 1, 0)
	b.Decoding()
	b.Decoding()
	check("decoding twice", 0, 1)
	if !b.Release() {
		t.Fatal("first Release reported false")
	}
	if b.Release() {
		t.Fatal("second Release reported true")
	}
	b.Decoding()
	check("after release", 0, 0)

	b2, _ := s.Book("10.0.0.1:1")
	b2.Release()
	check("released from prefill", 0, 0)
	if _, err := s.Book("10.9.9.9:1"); err == nil {
		t.Fatal("booking an unknown endpoint should fail")
	}
}

func TestConcurrentReleaseCountsOnce(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.1:1"})
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		b, _ := s.Book("10.0.0.1:1")
		released := make(chan bool, 3)
		for j := 0; j < 3; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b.Decoding()
				released <- b.Release()
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for j := 0; j < 3; j++ {
				if <-released {
					n++
				}
			}
			if n != 1 {
				t.Errorf("booking released %d times", n)
			}
		}()
	}
	wg.Wait()
	if l := s.All()[0]; l.InFlight() != 0 {
		t.Fatalf("in flight %d after all releases, want 0", l.InFlight())
	}
}

func TestUpdateDropsVanishedEndpointsAndKeepsOthers(t *testing.T) {
	s := New()
	select {
	case <-s.Ready():
		t.Fatal("ready before the first update")
	default:
	}
	s.Update([]string{"10.0.0.1:1", "10.0.0.2:1"})
	<-s.Ready()
	keep, _ := s.Book("10.0.0.1:1")
	gone, _ := s.Book("10.0.0.2:1")
	s.Update([]string{"10.0.0.1:1"})
	gone.Release()
	s.Update([]string{"10.0.0.1:1", "10.0.0.2:1"})
	all := s.All()
	if all[0].InFlight() != 1 || all[1].InFlight() != 0 {
		t.Fatalf("loads %+v: the staying endpoint keeps its booking, the returning one starts at zero", all)
	}
	keep.Release()
	if !s.Synced() {
		t.Fatal("not synced after Update")
	}
}

func TestImbalance(t *testing.T) {
	t0 := time.Unix(1000, 0)
	tests := []struct {
		name    string
		samples [][]Load
		want    float64
	}{
		{"no samples", nil, 1},
		{"one endpoint", [][]Load{{{Addr: "a", Prefill: 3}}}, 1},
		{"idle fleet", [][]Load{{{Addr: "a"}, {Addr: "b"}}}, 1},
		{"even", [][]Load{{{Addr: "a", Decode: 2}, {Addr: "b", Prefill: 2}}}, 1},
		{"means over the window", [][]Load{
			{{Addr: "a", Decode: 4}, {Addr: "b", Decode: 1}},
			{{Addr: "a", Decode: 2}, {Addr: "b", Decode: 3}},
			{{Addr: "a", Decode: 6}, {Addr: "b", Decode: 0}},
		}, 3},
		{"one idle throughout", [][]Load{{{Addr: "a", Decode: 1}, {Addr: "b"}}}, math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewImbalance(time.Minute)
			for i, s := range tt.samples {
				m.Sample(t0.Add(time.Duration(i)*time.Second), s)
			}
			if got := m.Value(); got != tt.want {
				t.Fatalf("imbalance %v, want %v", got, tt.want)
			}
		})
	}
	m := NewImbalance(10 * time.Second)
	m.Sample(t0, []Load{{Addr: "a", Decode: 100}, {Addr: "b", Decode: 1}})
	m.Sample(t0.Add(20*time.Second), []Load{{Addr: "a", Decode: 2}, {Addr: "b", Decode: 1}})
	if got := m.Value(); got != 2 {
		t.Fatalf("old samples must leave the window: got %v, want 2", got)
	}
}

func TestCollectorExportsLoads(t *testing.T) {
	s := New()
	s.Update([]string{"10.0.0.1:1", "10.0.0.2:1"})
	b, _ := s.Book("10.0.0.2:1")
	b.Decoding()
	_, _ = s.Book("10.0.0.2:1")
	want := `
# HELP loadaware_endpoints Endpoints in the current endpoint set.
# TYPE loadaware_endpoints gauge
loadaware_endpoints 2
`
	c := Collector{Set: s}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "loadaware_endpoints"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(c, "loadaware_inflight_requests"); n != 4 {
		t.Fatalf("%d in-flight series, want 4 (2 endpoints x 2 phases)", n)
	}
}
