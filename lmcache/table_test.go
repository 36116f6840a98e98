package lmcache

import (
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLookupWaitsOutAHeldShard holds the write lock of the shard of a prompt's first key,
// as ingestion does for one key's update: a lookup must neither read past it nor fail, but
// yield, then park on the lock (counted), and answer in full once the lock is let go.
func TestLookupWaitsOutAHeldShard(t *testing.T) {
	ix := newTestIndex(t, IndexConfig{})
	p := prompt(4, 1000)
	applyAll(t, ix, []Message{regMsg("a", 0, "10.0.0.1")}, t0)
	keys := ix.ChunkKeys(p)
	for _, k := range keys {
		applyAll(t, ix, []Message{KVAdmitMsg{InstanceID: "a", Key: k, Location: "cpu"}}, t0)
	}
	parked := func() float64 { return testutil.ToFloat64(ix.met.lockWaits[1]) }
	yielded := func() float64 { return testutil.ToFloat64(ix.met.lockWaits[0]) }
	if got := ix.LookupKeys(keys, len(p)); len(got) != 1 || got[0].Tokens != len(p) || parked()+yielded() != 0 {
		t.Fatalf("uncontended lookup = %+v, waits %v parked %v yielded", got, parked(), yielded())
	}

	sh := ix.shardOf(keys[0])
	sh.mu.Lock()
	done := make(chan []Match)
	go func() { done <- ix.LookupKeys(keys, len(p)) }()
	deadline := time.Now().Add(10 * time.Second)
	for parked() == 0 { // the lookup yields readYields times, then parks
		select {
		case got := <-done:
			sh.mu.Unlock()
			t.Fatalf("lookup returned %+v while its first key's shard was write-locked", got)
		default:
		}
		if time.Now().After(deadline) {
			sh.mu.Unlock()
			t.Fatal("the lookup did not park on the held shard in 10 s")
		}
		runtime.Gosched()
	}
	sh.mu.Unlock()
	got := <-done
	if len(got) != 1 || got[0].InstanceID != "a" || got[0].Tokens != len(p) {
		t.Fatalf("lookup after the lock was let go = %+v, want instance a with all %d tokens", got, len(p))
	}
	if parked() != 1 || yielded() != 0 {
		t.Errorf("waits: %v parked, %v yielded; want 1 parked", parked(), yielded())
	}
}
