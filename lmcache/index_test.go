package lmcache

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/loadaware/loadaware-epp/internal/testlog"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newTestIndex(t testing.TB, cfg IndexConfig) *Index {
	t.Helper()
	if cfg.Keys.HashSeed == "" {
		cfg.Keys.HashSeed = "123"
	}
	ix, err := NewIndex(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// prompt returns n token ids unique to id.
func prompt(id, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(id*100000 + i)
	}
	return t
}

// step is one message applied at t0 plus at.
type step struct {
	at  time.Duration
	msg Message
}

func regMsg(inst string, worker int, ip string) Message {
	return RegisterMsg{InstanceID: inst, WorkerID: worker, IP: ip, Port: 8000 + worker, DistributedURL: ptr("x")}
}

func hbMsg(inst string, worker int, ip string) Message {
	return HeartbeatMsg{InstanceID: inst, WorkerID: worker, IP: ip, Port: 8000 + worker}
}

// admits returns KVAdmitMsgs for the chunks [from, to) of tokens.
func admits(t testing.TB, inst string, worker int, loc string, tokens []uint32, from, to int) []Message {
	h, err := NewHasher(KeyConfig{HashSeed: "123"})
	if err != nil {
		t.Fatal(err)
	}
	keys := h.ChunkKeys(tokens)
	var out []Message
	for _, k := range keys[from:min(to, len(keys))] {
		out = append(out, KVAdmitMsg{InstanceID: inst, WorkerID: worker, Key: k, Location: loc})
	}
	return out
}

func evicts(t testing.TB, inst string, worker int, loc string, tokens []uint32, from, to int) []Message {
	var out []Message
	for _, m := range admits(t, inst, worker, loc, tokens, from, to) {
		out = append(out, KVEvictMsg(m.(KVAdmitMsg)))
	}
	return out
}

func cat(parts ...any) []Message {
	var out []Message
	for _, p := range parts {
		switch v := p.(type) {
		case Message:
			out = append(out, v)
		case []Message:
			out = append(out, v...)
		}
	}
	return out
}

func applyAll(t testing.TB, ix *Index, msgs []Message, at time.Time) {
	t.Helper()
	for _, m := range msgs {
		if err := ix.Apply(m, at); err != nil {
			t.Fatalf("Apply(%#v): %v", m, err)
		}
	}
}

func TestLookupScenarios(t *testing.T) {
	p := prompt(1, 1578) // 7 chunks, the last one partial (42 tokens)
	tests := []struct {
		name   string
		msgs   []Message
		tokens []uint32
		want   []Match
	}{
		{"nothing indexed", nil, p, nil},
		{"no tokens", cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7)), nil, nil},
		{"full prompt held, credit capped at the prompt length",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7)), p,
			[]Match{{InstanceID: "a", IP: "10.0.0.1", Tokens: 1578, HolderRank: 0}}},
		{"prefix of a longer prompt",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 3)), p,
			[]Match{{InstanceID: "a", IP: "10.0.0.1", Tokens: 768, HolderRank: 0}}},
		{"every holder is reported, ranked by who stored chunk 0 first",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.2"), admits(t, "b", 0, "cpu", p, 0, 2), admits(t, "a", 0, "cpu", p, 0, 5)), p,
			[]Match{{"a", "10.0.0.1", 1280, 1}, {"b", "10.0.0.2", 512, 0}}},
		{"credit ends at the first missing chunk",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 2), admits(t, "a", 0, "cpu", p, 3, 7)), p,
			[]Match{{"a", "10.0.0.1", 512, 0}}},
		{"holding later chunks without chunk 0 gives nothing",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 1, 7)), p, nil},
		{"an evicted chunk cuts the prefix",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), evicts(t, "a", 0, "cpu", p, 2, 3)), p,
			[]Match{{"a", "10.0.0.1", 512, 0}}},
		{"a chunk held at a second location survives eviction from the first",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), admits(t, "a", 0, "disk", p, 2, 3), evicts(t, "a", 0, "cpu", p, 2, 3)), p,
			[]Match{{"a", "10.0.0.1", 1578, 0}}},
		{"tensor-parallel workers of one instance count as one holder",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("a", 1, "10.0.0.1"), admits(t, "a", 1, "cpu", p, 0, 2), admits(t, "a", 0, "cpu", p, 0, 7)), p,
			[]Match{{"a", "10.0.0.1", 1578, 0}}},
		{"a re-admitted chunk 0 goes to the back of the holder order",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.2"), admits(t, "a", 0, "cpu", p, 0, 1), admits(t, "b", 0, "cpu", p, 0, 1),
				evicts(t, "a", 0, "cpu", p, 0, 1), admits(t, "a", 0, "cpu", p, 0, 1)), p,
			[]Match{{"b", "10.0.0.2", 256, 0}, {"a", "10.0.0.1", 256, 1}}},
		{"a duplicate admit changes nothing",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.2"), admits(t, "a", 0, "cpu", p, 0, 1), admits(t, "b", 0, "cpu", p, 0, 1), admits(t, "a", 0, "cpu", p, 0, 1)), p,
			[]Match{{"a", "10.0.0.1", 256, 0}, {"b", "10.0.0.2", 256, 1}}},
		{"batched operations (newer workers)",
			cat(regMsg("a", 0, "10.0.0.1"), batch(t, "a", p, []OpType{OpAdmit, OpAdmit, OpAdmit, OpEvict})), p,
			[]Match{{"a", "10.0.0.1", 256, 0}}},
		{"admits from an instance that never registered get no credit",
			cat(admits(t, "ghost", 0, "cpu", p, 0, 7)), p, nil},
		{"a heartbeat from an unknown worker registers it, crediting chunks admitted before",
			cat(admits(t, "a", 0, "cpu", p, 0, 7), hbMsg("a", 0, "10.0.0.1")), p,
			[]Match{{"a", "10.0.0.1", 1578, 0}}},
		{"a register from a known worker is a restart: its chunks are dropped",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 1)), p,
			[]Match{{"a", "10.0.0.1", 256, 0}}},
		{"a restart of one worker keeps the other worker's chunks",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("a", 1, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), admits(t, "a", 1, "cpu", p, 0, 3), regMsg("a", 0, "10.0.0.1")), p,
			[]Match{{"a", "10.0.0.1", 768, 0}}},
		{"deregistering drops the worker's chunks",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.2"), admits(t, "a", 0, "cpu", p, 0, 7), admits(t, "b", 0, "cpu", p, 0, 2),
				DeRegisterMsg{InstanceID: "a", WorkerID: 0, IP: "10.0.0.1"}), p,
			[]Match{{"b", "10.0.0.2", 512, 0}}},
		{"a newer instance on the same IP replaces the older at once: no phantom credit",
			cat(regMsg("old", 0, "10.0.0.1"), admits(t, "old", 0, "cpu", p, 0, 7), regMsg("new", 0, "10.0.0.1"), admits(t, "new", 0, "cpu", p, 0, 1)), p,
			[]Match{{"new", "10.0.0.1", 256, 0}}},
		{"two live instances on one IP: a configuration error, no credit for either",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.1"), admits(t, "b", 0, "cpu", p, 0, 7), admits(t, "a", 0, "cpu", p, 0, 7),
				regMsg("c", 0, "10.0.0.3"), admits(t, "c", 0, "cpu", p, 0, 1)), p,
			[]Match{{"c", "10.0.0.3", 256, 0}}},
		{"the conflict ends when the older instance deregisters",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.1"), admits(t, "b", 0, "cpu", p, 0, 7), admits(t, "a", 0, "cpu", p, 0, 7),
				DeRegisterMsg{InstanceID: "a"}), p,
			[]Match{{"b", "10.0.0.1", 1578, 0}}},
		{"the conflict ends when the newer instance deregisters; the older one takes the IP back when it speaks, with what it admits from then on",
			cat(regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.1"), admits(t, "b", 0, "cpu", p, 0, 7), admits(t, "a", 0, "cpu", p, 0, 7),
				DeRegisterMsg{InstanceID: "b"}, hbMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 3)), p,
			[]Match{{"a", "10.0.0.1", 768, 0}}},
		{"a superseded instance that stays silent does not get its IP back",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), regMsg("b", 0, "10.0.0.1"), DeRegisterMsg{InstanceID: "b"}), p, nil},
		{"a superseded instance that registers again takes its IP back",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), regMsg("b", 0, "10.0.0.1"), admits(t, "b", 0, "cpu", p, 0, 7), regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 2)), p,
			[]Match{{"a", "10.0.0.1", 512, 0}}},
		{"an instance that moves to a new IP keeps its chunks under the new IP",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), hbMsg("a", 0, "10.0.0.9")), p,
			[]Match{{"a", "10.0.0.9", 1578, 0}}},
		{"IPs are canonicalised",
			cat(regMsg("a", 0, "::ffff:10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 1)), p,
			[]Match{{"a", "10.0.0.1", 256, 0}}},
		{"a full sync replaces the worker's key set at that location",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), fullSyncMsgs(t, "a", "cpu", p, 0, 3, 0)), p,
			[]Match{{"a", "10.0.0.1", 768, 0}}},
		{"a full sync with a lost batch keeps the union",
			cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 7), fullSyncMsgs(t, "a", "cpu", p, 0, 3, 1)), p,
			[]Match{{"a", "10.0.0.1", 1578, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, IndexConfig{})
			applyAll(t, ix, tc.msgs, t0)
			if d := cmp.Diff(tc.want, ix.Lookup(tc.tokens)); d != "" {
				t.Fatalf("Lookup mismatch (-want +got):\n%s", d)
			}
		})
	}
}

func batch(t testing.TB, inst string, tokens []uint32, ops []OpType) Message {
	keys := newTestIndex(t, IndexConfig{}).ChunkKeys(tokens)
	m := BatchedKVOperationMsg{InstanceID: inst, Location: "cpu"}
	for i, op := range ops {
		m.Operations = append(m.Operations, KVOp{Op: op, Key: keys[min(i, 2)], SeqNum: int64(i)})
	}
	// The ops admit chunks 0, 1, 2 and evict chunk 2; evicting chunk 1 leaves chunk 0.
	m.Operations = append(m.Operations, KVOp{Op: OpEvict, Key: keys[1], SeqNum: 9})
	return m
}

// fullSyncMsgs sends chunks [from, to) as a full sync split in two batches; lost batches are
// simulated by claiming more keys than were sent.
func fullSyncMsgs(t testing.TB, inst, loc string, tokens []uint32, from, to, lost int) []Message {
	keys := newTestIndex(t, IndexConfig{}).ChunkKeys(tokens)[from:to]
	half := len(keys) / 2
	return []Message{
		FullSyncBatchMsg{InstanceID: inst, Location: loc, SyncID: "s1", BatchID: 0, Keys: keys[:half]},
		FullSyncBatchMsg{InstanceID: inst, Location: loc, SyncID: "s1", BatchID: 1, Keys: keys[half:]},
		FullSyncEndMsg{InstanceID: inst, Location: loc, SyncID: "s1", ActualTotalKeys: len(keys) + lost},
	}
}

func TestInstancesReportStates(t *testing.T) {
	p := prompt(1, 600)
	ix := newTestIndex(t, IndexConfig{})
	applyAll(t, ix, cat(
		regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 3), // a talks after b claimed: conflict; a's admits are not kept
		regMsg("c", 0, "10.0.0.2"), regMsg("d", 0, "10.0.0.2"), // c silent since: superseded
		admits(t, "e", 0, "cpu", p, 0, 1), // never registered
		regMsg("f", 0, "10.0.0.3"), regMsg("f", 1, "10.0.0.3"), admits(t, "f", 1, "disk", p, 0, 2),
	), t0)
	got := ix.InstancesByIP()
	type row struct {
		ID    string
		State InstanceState
		By    string
		W, K  int
	}
	flat := map[string][]row{}
	for ip, infos := range got {
		for _, i := range infos {
			flat[ip] = append(flat[ip], row{i.ID, i.State, i.SupersededBy, i.Workers, i.Keys})
		}
	}
	want := map[string][]row{
		"10.0.0.1": {{"a", StateConflict, "b", 1, 0}, {"b", StateConflict, "", 1, 0}},
		"10.0.0.2": {{"c", StateSuperseded, "d", 1, 0}, {"d", StateActive, "", 1, 0}},
		"":         {{"e", StateNoIP, "", 1, 1}},
		"10.0.0.3": {{"f", StateActive, "", 2, 2}},
	}
	if d := cmp.Diff(want, flat); d != "" {
		t.Fatalf("InstancesByIP mismatch (-want +got):\n%s", d)
	}
}

func TestSweepExpiresSilentHeartbeatingInstances(t *testing.T) {
	p := prompt(1, 300)
	tests := []struct {
		name    string
		timeout time.Duration
		steps   []step
		sweepAt time.Duration
		dropped int
		want    []Match
	}{
		{"never-heartbeating instances never expire", 0,
			[]step{{0, regMsg("a", 0, "10.0.0.1")}, {0, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			24 * time.Hour, 0, []Match{{"a", "10.0.0.1", 256, 0}}},
		{"automatic timeout: 6 heartbeat periods, not yet", 0,
			[]step{{0, hbMsg("a", 0, "10.0.0.1")}, {10 * time.Second, hbMsg("a", 0, "10.0.0.1")}, {10 * time.Second, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			70 * time.Second, 0, []Match{{"a", "10.0.0.1", 256, 0}}},
		{"automatic timeout: 6 heartbeat periods, expired", 0,
			[]step{{0, hbMsg("a", 0, "10.0.0.1")}, {10 * time.Second, hbMsg("a", 0, "10.0.0.1")}, {10 * time.Second, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			71 * time.Second, 1, nil},
		{"automatic timeout is at least 30 s", 0,
			[]step{{0, hbMsg("a", 0, "10.0.0.1")}, {time.Second, hbMsg("a", 0, "10.0.0.1")}, {time.Second, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			30 * time.Second, 0, []Match{{"a", "10.0.0.1", 256, 0}}},
		{"automatic timeout with one heartbeat seen is 5 min", 0,
			[]step{{0, hbMsg("a", 0, "10.0.0.1")}, {0, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			5*time.Minute + time.Second, 1, nil},
		{"any message counts as alive", 0,
			[]step{{0, hbMsg("a", 0, "10.0.0.1")}, {10 * time.Second, hbMsg("a", 0, "10.0.0.1")}, {60 * time.Second, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			100 * time.Second, 0, []Match{{"a", "10.0.0.1", 256, 0}}},
		{"fixed timeout", 5 * time.Second,
			[]step{{0, hbMsg("a", 0, "10.0.0.1")}, {0, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			6 * time.Second, 1, nil},
		{"expiry disabled", -1,
			[]step{{0, hbMsg("a", 0, "10.0.0.1")}, {0, admits(t, "a", 0, "cpu", p, 0, 1)[0]}},
			24 * time.Hour, 0, []Match{{"a", "10.0.0.1", 256, 0}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, IndexConfig{HeartbeatTimeout: tc.timeout})
			for _, s := range tc.steps {
				if err := ix.Apply(s.msg, t0.Add(s.at)); err != nil {
					t.Fatal(err)
				}
			}
			if n := ix.Sweep(t0.Add(tc.sweepAt)); n != tc.dropped {
				t.Errorf("Sweep dropped %d, want %d", n, tc.dropped)
			}
			if d := cmp.Diff(tc.want, ix.Lookup(p)); d != "" {
				t.Errorf("Lookup mismatch (-want +got):\n%s", d)
			}
			if tc.dropped > 0 && (ix.Keys() != 0 || len(ix.Instances()) != 0) {
				t.Errorf("after expiry: %d keys, instances %+v", ix.Keys(), ix.Instances())
			}
		})
	}
}

func TestApplyOutcomesAndMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	var logs bytes.Buffer
	ix := newTestIndex(t, IndexConfig{Registerer: reg, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p := prompt(1, 600)
	applyAll(t, ix, cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 3), admits(t, "a", 0, "cpu", p, 0, 1),
		evicts(t, "a", 0, "cpu", p, 2, 3), evicts(t, "a", 0, "cpu", p, 2, 3), DeRegisterMsg{InstanceID: "zz"}), t0)
	if err := ix.Apply(RegisterRetMsg{}, t0); !errors.Is(err, ErrNotWorkerMessage) {
		t.Errorf("Apply(RegisterRetMsg) = %v, want ErrNotWorkerMessage", err)
	}
	garbage := [][]byte{{0xc1}, {0xc1, 0x00}, []byte(`{"type":"Nope"}`), []byte(`{"type":"Nope"}`), []byte(`{"type":"KVAdmitMsg"}`)}
	for _, g := range garbage {
		if _, err := ix.ApplyFrame(g, t0); err == nil {
			t.Fatalf("ApplyFrame(%q) succeeded", g)
		}
	}
	if m, err := ix.ApplyFrame(mustEncode(t, admits(t, "a", 0, "cpu", p, 2, 3)[0]), t0); err != nil || m.Tag() != "KVAdmitMsg" {
		t.Fatalf("ApplyFrame(valid) = %v, %v", m, err)
	}
	ix.Lookup(p)
	ix.Lookup(prompt(2, 10))
	counts := []struct {
		c    prometheus.Collector
		want float64
	}{
		{ix.met.messages["KVAdmitMsg"][0], 4}, {ix.met.messages["KVAdmitMsg"][1], 1}, {ix.met.messages["KVAdmitMsg"][2], 1},
		{ix.met.messages["KVEvictMsg"][0], 1}, {ix.met.messages["KVEvictMsg"][1], 1},
		{ix.met.messages["DeRegisterMsg"][1], 1}, {ix.met.messages["other"][2], 4},
		{ix.met.invalid[KindMalformed], 2}, {ix.met.invalid[KindUnknownType], 2}, {ix.met.invalid[KindMissingField], 1},
		{ix.met.lookups, 2}, {ix.met.hits, 1}, {ix.met.keys, 3},
	}
	for i, c := range counts {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("metric %d = %v, want %v", i, got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "loadaware_lmcache_lookup_duration_seconds", "loadaware_lmcache_lookup_matched_fraction"); err != nil || n != 2 {
		t.Errorf("histograms: %d, %v", n, err)
	}
	if got := strings.Count(logs.String(), "could not be decoded"); got != 3 {
		t.Errorf("decode problems logged %d times, want once per kind (3):\n%s", got, logs.String())
	}
	if _, err := NewIndex(IndexConfig{Keys: KeyConfig{HashSeed: "1"}, Registerer: reg}); err == nil {
		t.Error("a second index on the same registry registered its metrics without error")
	}
}

func TestLookupsRunDuringIngestion(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{})
	applyAll(t, ix, []Message{regMsg("a", 0, "10.0.0.1"), regMsg("b", 0, "10.0.0.2")}, t0)
	p := prompt(1, 1578)
	keys := ix.ChunkKeys(p)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, inst := range []string{"a", "b"} {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := keys[i%len(keys)]
				var m Message = KVAdmitMsg{InstanceID: inst, Key: k, Location: "cpu"}
				if i%3 == 2 {
					m = KVEvictMsg{InstanceID: inst, Key: k, Location: "cpu"}
				}
				if err := ix.Apply(m, t0); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for range 2000 {
		for _, m := range ix.Lookup(p) {
			if m.Tokens <= 0 || m.Tokens > len(p) || m.Tokens%256 != 0 && m.Tokens != len(p) || m.HolderRank < 0 || m.HolderRank > 1 {
				t.Fatalf("impossible match %+v", m)
			}
		}
	}
	close(stop)
	wg.Wait()
}

func TestMatchEndpoints(t *testing.T) {
	p := prompt(1, 600)
	var logs testlog.Buffer
	ix := newTestIndex(t, IndexConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	applyAll(t, ix, cat(
		regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", p, 0, 3),
		regMsg("b", 0, "10.0.0.2"), admits(t, "b", 0, "cpu", p, 0, 1),
		regMsg("c", 0, "10.0.0.3"), admits(t, "c", 0, "cpu", p, 0, 2),
		regMsg("d", 0, "fd00::4"), admits(t, "d", 0, "cpu", p, 0, 2),
	), t0)
	endpoints := []string{"10.0.0.9:8000", "10.0.0.2:8000", "10.0.0.1:8000", "10.0.0.3:8000", "10.0.0.3:8001", "engine-0:8000", "[fd00::4]:8000"}
	want := []EndpointMatch{{0, -1}, {256, 1}, {600, 0}, {0, -1}, {0, -1}, {0, -1}, {512, 3}}
	for range 2 {
		if d := cmp.Diff(want, ix.MatchEndpoints(p, endpoints)); d != "" {
			t.Fatalf("MatchEndpoints mismatch (-want +got):\n%s", d)
		}
	}
	for _, s := range []string{"endpoint=engine-0:8000", "endpoint=10.0.0.3:8000", "endpoint=10.0.0.3:8001"} {
		if n := strings.Count(logs.String(), s); n != 1 {
			t.Errorf("%s logged %d times, want once:\n%s", s, n, logs.String())
		}
	}
	if got := ix.MatchEndpoints(prompt(5, 10), endpoints[:2]); !cmp.Equal(got, []EndpointMatch{{0, -1}, {0, -1}}) {
		t.Errorf("unknown prompt: %+v", got)
	}
}

func TestRoutedFeedsTheDetector(t *testing.T) {
	d, err := NewMissDetector(MissConfig{MinAdmits: 2, MinPrompts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ix := newTestIndex(t, IndexConfig{Detector: d})
	good, other := prompt(1, 600), prompt(2, 600)
	ix.Routed("10.0.0.1:8000", good)
	ix.Routed("10.0.0.2:8000", good)
	applyAll(t, ix, cat(regMsg("a", 0, "10.0.0.1"), admits(t, "a", 0, "cpu", good, 0, 3),
		regMsg("b", 0, "10.0.0.2"), admits(t, "b", 0, "cpu", other, 0, 3)), t0)
	if got := d.Suspected(); len(got) != 1 || got[0] != "10.0.0.2" {
		t.Errorf("Suspected = %v, want [10.0.0.2]", got)
	}
	newTestIndex(t, IndexConfig{}).Routed("10.0.0.1:8000", good) // no detector: nothing to do
}

func TestUnregisteredInstancesTakeTheirConnectionsIP(t *testing.T) {
	p := prompt(1, 600)
	frames := func(inst string) [][]byte { return encodeAll(t, admits(t, inst, 0, "cpu", p, 0, 3)) }
	tests := []struct {
		name  string
		setup []Message
		inst  string
		peer  string
		want  []Match
		state InstanceState
	}{
		{"unclaimed peer IP is adopted", nil, "silent", "10.1.2.3", []Match{{"silent", "10.1.2.3", 600, 0}}, StateActive},
		{"peer IP is canonicalised", nil, "silent", "::ffff:10.1.2.3", []Match{{"silent", "10.1.2.3", 600, 0}}, StateActive},
		{"unknown peer leaves it without IP", nil, "silent", "", nil, StateNoIP},
		{"an unspecified peer IP is not used", nil, "silent", "0.0.0.0", nil, StateNoIP},
		{"a peer IP claimed by a registered instance is not taken", []Message{regMsg("a", 0, "10.1.2.3")}, "silent", "10.1.2.3", nil, StateNoIP},
		{"another IP may not speak for a registered instance", []Message{regMsg("silent", 0, "10.0.0.7")}, "silent", "10.1.2.3", nil, StateActive},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix := newTestIndex(t, IndexConfig{})
			applyAll(t, ix, tc.setup, t0)
			want := 3
			if tc.setup != nil && tc.setup[0].(RegisterMsg).InstanceID == tc.inst {
				want = 0 // refused: the instance belongs to another IP
			}
			if n := ix.ApplyFrames(frames(tc.inst), tc.peer, t0); n != want {
				t.Fatalf("ApplyFrames applied %d frames, want %d", n, want)
			}
			if d := cmp.Diff(tc.want, ix.Lookup(p)); d != "" {
				t.Errorf("Lookup mismatch (-want +got):\n%s", d)
			}
			for _, info := range ix.Instances() {
				if info.ID == tc.inst && info.State != tc.state {
					t.Errorf("state %s, want %s", info.State, tc.state)
				}
			}
		})
	}
}
