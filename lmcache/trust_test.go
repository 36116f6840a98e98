package lmcache

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// from applies msgs as one network batch from peer; it returns how many were applied.
func from(t testing.TB, ix *Index, peer string, msgs ...Message) int {
	t.Helper()
	return ix.ApplyFrames(encodeAll(t.(*testing.T), msgs), peer, t0)
}

// The rows of issue 10's table about the cache control plane, each from the network
// (ApplyFrames with the connection's IP), against an index where engine A is 10.0.0.1 and
// engine B is 10.0.0.2 and B holds prompt p.
func TestOneEngineCannotSpeakForAnother(t *testing.T) {
	p, q := prompt(1, 600), prompt(2, 600)
	wantB := []Match{{"b", "10.0.0.2", 600, 0}}
	tests := []struct {
		name       string
		attack     []Message // sent from A's IP
		reason     string    // refusal counted
		wantP      []Match   // who holds p afterwards
		wantQOwner string    // who q is credited to after B admits it ("" = nobody)
	}{
		{"admits under B's id", admits(t, "b", 0, "cpu", q, 0, 3), RefusedInstanceElsewhere, wantB, "b"},
		{"evicts under B's id", evicts(t, "b", 0, "cpu", p, 0, 3), RefusedInstanceElsewhere, wantB, "b"},
		{"deregister of B", []Message{DeRegisterMsg{InstanceID: "b", WorkerID: 0, IP: "10.0.0.2"}}, RefusedInstanceElsewhere, wantB, "b"},
		{"a register claiming B's IP", []Message{regMsg("evil", 0, "10.0.0.2")}, RefusedIPMismatch, wantB, "b"},
		{"a heartbeat claiming B's IP", []Message{hbMsg("evil", 0, "10.0.0.2")}, RefusedIPMismatch, wantB, "b"},
		{"B's id registered again from A (a shared instance id)", []Message{regMsg("b", 0, "10.0.0.1")}, RefusedInstanceElsewhere, wantB, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			ix := newTestIndex(t, IndexConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if n := from(t, ix, "10.0.0.1", regMsg("a", 0, "10.0.0.1")); n != 1 {
				t.Fatalf("A's register applied %d", n)
			}
			if n := from(t, ix, "10.0.0.2", cat(regMsg("b", 0, "10.0.0.2"), admits(t, "b", 0, "cpu", p, 0, 3))...); n != 4 {
				t.Fatalf("B's messages applied %d, want 4", n)
			}
			if n := from(t, ix, "10.0.0.1", tt.attack...); n != 0 {
				t.Fatalf("%d of A's messages about B were applied", n)
			}
			if got := testutil.ToFloat64(ix.trust.refused.WithLabelValues(tt.reason)); got != float64(len(tt.attack)) {
				t.Fatalf("refused{%s} = %v, want %d", tt.reason, got, len(tt.attack))
			}
			if d := cmp.Diff(tt.wantP, ix.Lookup(p)); d != "" {
				t.Fatalf("B's credit changed (-want +got):\n%s", d)
			}
			from(t, ix, "10.0.0.2", admits(t, "b", 0, "cpu", q, 0, 3)...)
			if got := ix.Lookup(q); len(got) != 1 || got[0].InstanceID != tt.wantQOwner || got[0].IP != "10.0.0.2" {
				t.Fatalf("B's own later admits are credited to %+v, want B on 10.0.0.2", got)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "reason="+tt.reason) ||
				!strings.Contains(logs.String(), "10.0.0.1") || !strings.Contains(logs.String(), "detail=") {
				t.Fatalf("no WARN naming %s, the peer and the detail:\n%s", tt.reason, logs.String())
			}
		})
	}
}

func TestJunkInstanceIDsAreCappedPerIP(t *testing.T) {
	var logs bytes.Buffer
	ix := newTestIndex(t, IndexConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil)), MaxInstancesPerIP: 4})
	p := prompt(1, 300)
	applied := 0
	for i := range 5000 {
		applied += from(t, ix, "10.0.0.1", admits(t, fmt.Sprintf("junk-%d", i), 0, "cpu", p, 0, 1)...)
	}
	if applied != 4 {
		t.Fatalf("%d junk instances admitted, want 4 (the cap)", applied)
	}
	if n := len(ix.Instances()); n != 4 {
		t.Fatalf("%d instances known, want 4", n)
	}
	if got := testutil.ToFloat64(ix.trust.refused.WithLabelValues(RefusedInstancesPerIP)); got != 4996 {
		t.Fatalf("refused{instances-per-ip} = %v, want 4996", got)
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 10 {
		t.Fatalf("%d log lines for 5000 junk ids: the log must be rate-limited:\n%s", lines, logs.String())
	}
	// Another IP is not affected.
	if n := from(t, ix, "10.0.0.2", regMsg("b", 0, "10.0.0.2")); n != 1 {
		t.Fatal("another engine's register was refused")
	}
}

// An engine restarting four times (new instance id each time, same IP): only the newest
// generation's keys stay, and the superseded instances do not use up the per-IP cap.
func TestSupersededGenerationsAreSwept(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{MaxInstancesPerIP: 2})
	for g := range 4 {
		id := fmt.Sprintf("gen-%d", g)
		p := prompt(g+1, 256*50)
		if n := from(t, ix, "10.0.0.1", cat(regMsg(id, 0, "10.0.0.1"), admits(t, id, 0, "cpu", p, 0, 50))...); n != 51 {
			t.Fatalf("generation %d: %d of 51 messages applied", g, n)
		}
		if ix.Keys() != 50 {
			t.Fatalf("after generation %d the index holds %d keys, want only its 50", g, ix.Keys())
		}
	}
	if got := testutil.ToFloat64(ix.trust.swept); got != 150 {
		t.Fatalf("swept %v keys, want 150", got)
	}
	// A superseded instance that keeps talking gets no keys back.
	from(t, ix, "10.0.0.1", admits(t, "gen-2", 0, "cpu", prompt(3, 256*50), 0, 50)...)
	if ix.Keys() != 50 {
		t.Fatalf("a superseded instance's admits were kept: %d keys", ix.Keys())
	}
}

func TestKeyBudgetEvictsLeastRecentlyUsed(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{MaxKeys: 1000})
	from(t, ix, "10.0.0.1", regMsg("a", 0, "10.0.0.1"))
	hot := prompt(0, 256*20)
	from(t, ix, "10.0.0.1", admits(t, "a", 0, "cpu", hot, 0, 20)...)
	for i := 1; i <= 30; i++ {
		p := prompt(i, 256*100)
		from(t, ix, "10.0.0.1", admits(t, "a", 0, "cpu", p, 0, 100)...)
		ix.Lookup(hot) // the hot prompt is used all along
		if ix.Keys() > 1000 {
			t.Fatalf("after %d prompts the index holds %d keys, over its budget of 1000", i, ix.Keys())
		}
	}
	if got := ix.Lookup(hot); len(got) != 1 || got[0].Tokens != 256*20 {
		t.Fatalf("the prompt looked up all along was evicted: %+v", got)
	}
	if got := ix.Lookup(prompt(1, 256*100)); len(got) != 0 {
		t.Fatalf("the oldest unused prompt is still held: %+v", got)
	}
	if got := ix.Lookup(prompt(30, 256*100)); len(got) != 1 || got[0].Tokens != 256*100 {
		t.Fatalf("the newest prompt is not fully held: %+v", got)
	}
	if testutil.ToFloat64(ix.trust.evicted) == 0 {
		t.Fatal("evictions not counted")
	}
	// The slots' own key sets shrank with the index.
	if info := ix.Instances(); len(info) != 1 || info[0].Keys != ix.Keys() {
		t.Fatalf("instance key count %+v, index %d", info, ix.Keys())
	}
}

func TestRetainIPsDropsDepartedEngines(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{})
	p := prompt(1, 600)
	from(t, ix, "10.0.0.1", cat(regMsg("shared", 0, "10.0.0.1"), admits(t, "shared", 0, "cpu", p, 0, 3))...)
	// While 10.0.0.1 is in the fleet, a second engine with the same id is refused...
	if n := from(t, ix, "10.0.0.2", regMsg("shared", 0, "10.0.0.2")); n != 0 {
		t.Fatal("a second address took an instance id over")
	}
	// ... once it left, the id may be registered elsewhere (a rescheduled pod).
	if n := ix.RetainIPs(map[string]bool{"10.0.0.2": true}); n != 1 {
		t.Fatalf("RetainIPs dropped %d instances, want 1", n)
	}
	if ix.Keys() != 0 {
		t.Fatalf("%d keys left of the departed engine", ix.Keys())
	}
	if n := from(t, ix, "10.0.0.2", regMsg("shared", 0, "10.0.0.2")); n != 1 {
		t.Fatal("the id could not be registered after its old engine left")
	}
}

// BenchmarkIngestInstances ingests n distinct instance ids (one admit each, from n
// distinct IPs, so no cap applies): the time per instance must not grow with n.
func BenchmarkIngestInstances(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) {
			frames := make([][][]byte, n)
			peers := make([]string, n)
			for i := range frames {
				m := KVAdmitMsg{InstanceID: fmt.Sprintf("i-%d", i), Key: int64(i), Location: "cpu"}
				f, err := Encode(m)
				if err != nil {
					b.Fatal(err)
				}
				frames[i] = [][]byte{f}
				peers[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255+1)
			}
			b.ResetTimer()
			for range b.N {
				ix := newTestIndex(b, IndexConfig{})
				for i := range frames {
					ix.ApplyFrames(frames[i], peers[i], t0)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/instance")
		})
	}
}

// FuzzIndexFromPeers drives the index with messages built from the input (each 4 bytes: the
// peer among four IPs, the message type, the instance id among eight, a key) and checks the
// trust model's invariants after every batch: the key budget and the per-IP instance cap
// hold, and an instance is only ever credited to the IP that first spoke for it.
func FuzzIndexFromPeers(f *testing.F) {
	f.Add([]byte{0, 0, 0, 1, 0, 3, 0, 2, 1, 3, 0, 2, 1, 0, 0, 0})
	f.Add([]byte{0, 0, 1, 0, 1, 0, 1, 0, 0, 3, 1, 5, 1, 4, 1, 5, 2, 1, 2, 0})
	f.Fuzz(fuzzBody)
}

func fuzzBody(t *testing.T, in []byte) {
	peers := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "::ffff:10.0.0.4"}
	{
		ix := newTestIndex(t, IndexConfig{MaxKeys: 16, MaxInstancesPerIP: 2})
		owner := map[string]string{} // instance id -> the IP that first got a message applied
		for len(in) >= 4 {
			peer, kind, id, key := peers[in[0]%4], in[1]%6, fmt.Sprintf("i%d", in[2]%8), int64(in[3])
			in = in[4:]
			claim := peers[(int(in0(in))+int(key))%4]
			var m Message
			switch kind {
			case 0:
				m = RegisterMsg{InstanceID: id, IP: claim, Port: 8000}
			case 1:
				m = HeartbeatMsg{InstanceID: id, IP: claim}
			case 2:
				m = DeRegisterMsg{InstanceID: id}
			case 3:
				m = KVAdmitMsg{InstanceID: id, Key: key, Location: "cpu"}
			case 4:
				m = KVEvictMsg{InstanceID: id, Key: key, Location: "cpu"}
			default:
				m = FullSyncBatchMsg{InstanceID: id, Location: "cpu", SyncID: "s", Keys: []int64{key, key + 1, key + 2}}
			}
			f, err := Encode(m)
			if err != nil {
				t.Fatal(err)
			}
			if ix.ApplyFrames([][]byte{f}, peer, t0) == 1 {
				if _, seen := owner[id]; !seen {
					owner[id] = canonicalIP(peer)
				}
				if _, ok := m.(DeRegisterMsg); ok {
					delete(owner, id)
				}
			}
			if ix.Keys() > 16 {
				t.Fatalf("%d keys held, over the budget of 16", ix.Keys())
			}
			checkCredit(t, ix, fmt.Sprintf("after %#v from %s", m, peer))
			// liveKeys also checks the retired slots: out of slotByID and their workers, credit nobody.
			if live := liveKeys(t, ix); live > ix.Keys() {
				t.Fatalf("%d live keys, more than the %d held", live, ix.Keys())
			}
			perIP := map[string]int{}
			infos := ix.Instances()
			present := map[string]bool{}
			for _, info := range infos {
				present[info.ID] = true
			}
			for id := range owner {
				if !present[id] {
					delete(owner, id) // forgotten (deregistered, or a superseded tombstone evicted): the id is free again
				}
			}
			for _, info := range infos {
				o, known := owner[info.ID]
				if info.State == StateActive && (!known || info.IP != o) {
					t.Fatalf("instance %s credited to %s, but %q spoke for it first", info.ID, info.IP, o)
				}
				if known {
					perIP[o]++
				}
			}
			for ip, n := range perIP {
				if n > 2 {
					t.Fatalf("%d instances on %s, over the cap of 2", n, ip)
				}
			}
		}
	}
}

func in0(b []byte) byte {
	if len(b) == 0 {
		return 0
	}
	return b[0]
}

// Issue 10's "3 full syncs of 2M keys", scaled: a full sync larger than the key budget
// leaves the index at the budget and ends without evicting (it cannot tell what it lost).
func TestFullSyncLargerThanTheBudget(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{MaxKeys: 500})
	from(t, ix, "10.0.0.1", regMsg("a", 0, "10.0.0.1"))
	for round := range 3 {
		sync := fmt.Sprintf("s%d", round)
		total := 0
		for b := range 4 {
			keys := make([]int64, 400)
			for i := range keys {
				keys[i] = int64(round*1_000_000 + b*1000 + i)
			}
			total += len(keys)
			if n := from(t, ix, "10.0.0.1", FullSyncBatchMsg{InstanceID: "a", Location: "cpu", SyncID: sync, BatchID: b, Keys: keys}); n != 1 {
				t.Fatalf("batch %d of sync %d refused", b, round)
			}
			if ix.Keys() > 500 {
				t.Fatalf("sync %d batch %d: %d keys, over the budget of 500", round, b, ix.Keys())
			}
		}
		if n := from(t, ix, "10.0.0.1", FullSyncEndMsg{InstanceID: "a", Location: "cpu", SyncID: sync, ActualTotalKeys: total}); n != 1 {
			t.Fatalf("end of sync %d refused", round)
		}
		if ix.Keys() == 0 || ix.Keys() > 500 {
			t.Fatalf("after sync %d: %d keys, want some, at most 500", round, ix.Keys())
		}
	}
}

// Each reason's sentence names what the operator needs (the instance, the IPs, the
// limit), and each reason's error wraps ErrRefused and names the reason.
func TestRefusalSentences(t *testing.T) {
	for _, c := range []struct {
		r    refusal
		want []string
	}{
		{refusal{reason: RefusedIPMismatch, id: "x", claimed: "10.0.0.2", peer: "10.0.0.1"}, []string{`"x"`, "10.0.0.2", "10.0.0.1", "its own IP"}},
		{refusal{reason: RefusedInstanceElsewhere, id: "b", home: "10.0.0.2", peer: "10.0.0.1"}, []string{`"b"`, "10.0.0.2", "10.0.0.1", "lmcache_instance_id"}},
		{refusal{reason: RefusedInstancesPerIP, id: "j", peer: "10.0.0.1", instancesOnPeer: 8}, []string{`"j"`, "10.0.0.1", "8 LMCache instances"}},
		{refusal{reason: RefusedNoPeer}, []string{"ZMTP front", "key"}},
	} {
		why := c.r.why()
		for _, w := range c.want {
			if !strings.Contains(why, w) {
				t.Errorf("%s: %q lacks %q", c.r.reason, why, w)
			}
		}
		err := refusedErrs[c.r.reason]
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), c.r.reason) {
			t.Errorf("%s: error %v does not wrap ErrRefused and name the reason", c.r.reason, err)
		}
	}
}
