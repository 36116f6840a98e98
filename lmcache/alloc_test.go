package lmcache

import (
	"fmt"
	"testing"
)

// TestCanonicalIP checks the forms canonicalIP accepts, and that an address already in
// canonical form, alone or as an IPv4 "ip:port", comes back without an allocation.
func TestCanonicalIP(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.0.0.1", "10.0.0.1"},
		{" 10.0.0.1 ", "10.0.0.1"},
		{"10.0.0.1:8000", "10.0.0.1"},
		{"10.0.0.1:", "10.0.0.1"},
		{"010.0.0.1:8000", "010.0.0.1"},
		{"engine-0.svc:8000", "engine-0.svc"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"[::ffff:10.0.0.1]:8000", "10.0.0.1"},
		{"fd00::1", "fd00::1"},
		{"FD00:0::1", "fd00::1"},
		{"[fd00::1]:8000", "fd00::1"},
		{"engine-0.svc", "engine-0.svc"},
		{"", ""},
	} {
		if got := canonicalIP(tc.in); got != tc.want {
			t.Errorf("canonicalIP(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	for _, in := range []string{"10.0.0.1", "fd00::1", "10.0.0.1:8000"} {
		if n := testing.AllocsPerRun(100, func() { canonicalIP(in) }); n != 0 {
			t.Errorf("canonicalIP(%q) allocates %v times, want 0", in, n)
		}
	}
}

// TestRegistrationAllocatesOnlyWhatItKeeps bounds the allocations of one registration in
// a registry of 300 instances: a new instance keeps its record, its worker (each with a
// map), its view entry and, on a new IP, that IP's set of instances (a map); a restart
// keeps nothing new, a supersede what a new instance on a known IP keeps. Logging (Info is enabled in production) and the IP's canonical form
// must not allocate (decision 1114).
func TestRegistrationAllocatesOnlyWhatItKeeps(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	ip := func(i int) string { return fmt.Sprintf("10.1.%d.%d", i>>8&255, i&255+1) }
	for _, tc := range []struct {
		kind string
		msg  func(i int) Message
		max  float64
	}{
		{"new instance", func(i int) Message { return regMsg(fmt.Sprintf("new-%d", i), 0, ip(1000+i)) }, 8},
		{"restart", func(i int) Message { return regMsg(fmt.Sprintf("i-%d", i%300), 0, ip(i%300)) }, 0},
		{"supersede", func(i int) Message { return regMsg(fmt.Sprintf("s-%d", i), 0, ip(i%300)) }, 6},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			ix := newTestIndex(t, IndexConfig{})
			for i := range 300 {
				applyAll(t, ix, []Message{regMsg(fmt.Sprintf("i-%d", i), 0, ip(i)),
					KVAdmitMsg{InstanceID: fmt.Sprintf("i-%d", i), Key: int64(i + 1), Location: "cpu"}}, t0)
			}
			msgs := make([]Message, 202)
			for i := range msgs {
				msgs[i] = tc.msg(i)
			}
			i := 0
			got := testing.AllocsPerRun(200, func() {
				if err := ix.Apply(msgs[i], t0); err != nil {
					t.Fatal(err)
				}
				i++
			})
			if got > tc.max {
				t.Errorf("%s allocates %v times, want at most %v", tc.kind, got, tc.max)
			}
		})
	}
}

// TestDecodeAllocatesOnlyWhatVaries counts the allocations of decoding one frame: the
// message (boxed into a Message) and its strings, but not the tag nor a location LMCache
// 0.3.9 names, which most frames repeat (decision 1143).
func TestDecodeAllocatesOnlyWhatVaries(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	for _, tc := range []struct {
		name string
		msg  Message
		want float64
	}{
		{"admit, a known location", KVAdmitMsg{InstanceID: "vllm-0", Key: 7, Location: "LocalCPUBackend"}, 2},
		{"admit, the other known location", KVAdmitMsg{InstanceID: "vllm-0", Key: 7, Location: "LocalDiskBackend"}, 2},
		{"admit, another location", KVAdmitMsg{InstanceID: "vllm-0", Key: 7, Location: "RemoteBackend"}, 3},
		{"evict, a known location", KVEvictMsg{InstanceID: "vllm-0", Key: 7, Location: "LocalCPUBackend"}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			frame := mustEncode(t, tc.msg)
			got := testing.AllocsPerRun(100, func() {
				m, err := Decode(frame)
				if err != nil || m.Tag() != tc.msg.Tag() {
					t.Fatalf("Decode: %#v, %v", m, err)
				}
			})
			if got != tc.want {
				t.Errorf("decoding %T allocates %v times, want %v", tc.msg, got, tc.want)
			}
		})
	}
}
