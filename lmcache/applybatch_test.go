package lmcache

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestApplyFramesAllocatesOnlyItsMessages bounds what applying a worker's batch allocates:
// one value per decoded message and the first frame's instance id, whatever the batch's
// size up to maxBatchFrames: no list of the messages, no copy of an instance id its
// previous frame named. The keys are held already, so the key table does not grow.
func TestApplyFramesAllocatesOnlyItsMessages(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	for _, n := range []int{1, 7, 50} {
		t.Run(fmt.Sprintf("frames=%d", n), func(t *testing.T) {
			ix := newTestIndex(t, IndexConfig{})
			const peer = "127.0.0.2"
			url := peer + ":0"
			if got := ix.ApplyFrames([][]byte{mustEncode(t, RegisterMsg{InstanceID: "engine-0", IP: peer, Port: 8001, DistributedURL: &url})}, peer, t0); got != 1 {
				t.Fatalf("the RegisterMsg was not applied (%d)", got)
			}
			frames := make([][]byte, n)
			for i := range frames {
				frames[i] = mustEncode(t, KVAdmitMsg{InstanceID: "engine-0", Key: int64(i), Location: "LocalCPUBackend"})
			}
			if got := ix.ApplyFrames(frames, peer, t0); got != n {
				t.Fatalf("applied %d of %d frames", got, n)
			}
			allocs := testing.AllocsPerRun(50, func() { ix.ApplyFrames(frames, peer, t0) })
			if allocs > float64(n+1) {
				t.Errorf("ApplyFrames of %d frames allocates %v times; want at most %d (one per message, and the first one's instance id)", n, allocs, n+1)
			}
		})
	}
}

// reportCPU starts counting the process's CPU time; the function it returns reports it
// per op as cpu-ns/op (where the platform gives it).
func reportCPU(b *testing.B) func() {
	cpu0, ok := processCPU()
	return func() {
		if cpu1, _ := processCPU(); ok {
			b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

// FuzzDecodeAfter holds decodeAfter to Decode: for any frame and any previous instance id,
// the same message (the instance id equal in value) or the same error.
func FuzzDecodeAfter(f *testing.F) {
	f.Add(unhex(f, specAdmit), "")
	f.Add(mustEncode(f, KVAdmitMsg{InstanceID: "engine-0", Key: 1, Location: "LocalCPUBackend"}), "engine-0")
	f.Add(mustEncode(f, KVAdmitMsg{InstanceID: "engine-0", Key: 1, Location: "LocalCPUBackend"}), "engine-1")
	f.Add(mustEncode(f, BatchedKVOperationMsg{InstanceID: "i", Operations: []KVOp{{Op: OpAdmit, Key: 2}}}), "i")
	f.Add([]byte(`{"type":"KVAdmitMsg","instance_id":"i","key":1}`), "i")
	r := rand.New(rand.NewPCG(5, 6))
	for range 8 {
		f.Add(mustEncode(f, randomMessage(r)), "")
	}
	f.Fuzz(func(t *testing.T, frame []byte, prev string) {
		want, wantErr := Decode(frame)
		got, err := decodeAfter(frame, prev)
		if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("decodeAfter(frame, %q) error = %v; Decode's = %v", prev, err, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeAfter(frame, %q) = %#v; Decode = %#v", prev, got, want)
		}
	})
}

// BenchmarkApplyBatch7 is the in-process share of one LMCache batch as extload's feeder
// sends it: 7 KVAdmitMsg frames of new keys from an instance registered on the batch's
// peer IP, into an index with a MissDetector (as the picker builds it). One iteration is
// one batch. decode is Decode of the 7 frames alone; apply is ApplyFrames (decode, key
// fill, index insert, detector, metrics). The receive from ZeroMQ and the wake-ups are not
// in it (BenchmarkServerIngestPaced). The frames are encoded before the clock starts, at
// most 1<<17 batches; beyond that they repeat (admits of keys held already). cpu-ns/op is
// the process's CPU time per batch (the collector's included), steadier than ns/op on a
// shared machine, where the wall clock counts other processes' time slices.
func BenchmarkApplyBatch7(b *testing.B) {
	const perBatch, maxBatches = 7, 1 << 17
	frames := func(n int) [][][]byte {
		r := rand.New(rand.NewPCG(7, 7))
		out := make([][][]byte, min(n, maxBatches))
		for i := range out {
			out[i] = make([][]byte, perBatch)
			for j := range out[i] {
				out[i][j] = mustEncode(b, KVAdmitMsg{InstanceID: "extload-engine-0", Key: int64(r.Uint64()), Location: "LocalCPUBackend"})
			}
		}
		return out
	}
	b.Run("decode", func(b *testing.B) {
		batches := frames(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		for i := range b.N {
			for _, f := range batches[i%len(batches)] {
				if _, err := Decode(f); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("apply", func(b *testing.B) {
		det, err := NewMissDetector(MissConfig{})
		if err != nil {
			b.Fatal(err)
		}
		ix := newTestIndex(b, IndexConfig{Detector: det})
		const peer = "127.0.0.2"
		url := peer + ":0"
		reg := mustEncode(b, RegisterMsg{InstanceID: "extload-engine-0", IP: peer, Port: 8001, DistributedURL: &url})
		if n := ix.ApplyFrames([][]byte{reg}, peer, t0); n != 1 {
			b.Fatalf("the RegisterMsg was not applied (%d)", n)
		}
		det.Sent(peer, []int64{1, 2, 3})
		batches := frames(b.N)
		b.ReportAllocs()
		b.ResetTimer()
		defer reportCPU(b)()
		for i := range b.N {
			if n := ix.ApplyFrames(batches[i%len(batches)], peer, t0); n != perBatch {
				b.Fatalf("applied %d of %d frames", n, perBatch)
			}
		}
	})
}

// BenchmarkApplyJunk is the in-process cost of the soak's `lmcache` hostile client
// (bench/soak): one engine IP pushing batches of 50 KVAdmitMsg frames of random keys,
// every other batch from one instance ("junk-0", which claims the IP and fills the key
// budget) and the others from a new instance id a frame (refused: the IP's instance cap).
// One iteration is one batch of ApplyFrames into an index of the soak's budget (200,000
// keys); ns/event and cpu-ns/event divide by the 50 frames. The frames are encoded before
// the clock starts (4,096 batches, then repeated: admits of keys held already).
func BenchmarkApplyJunk(b *testing.B) {
	const perBatch, pool, peer = 50, 4096, "127.0.0.3"
	r := rand.New(rand.NewPCG(1, 2))
	batches := make([][][]byte, pool)
	for i := range batches {
		batches[i] = make([][]byte, perBatch)
		for j := range batches[i] {
			m := KVAdmitMsg{InstanceID: fmt.Sprintf("junk-%d", r.IntN(1_000_000)), Key: int64(r.Uint64()), Location: "cpu"}
			if i%2 == 0 {
				m.InstanceID = "junk-0"
			}
			batches[i][j] = mustEncode(b, m)
		}
	}
	ix := newTestIndex(b, IndexConfig{MaxKeys: 200_000})
	ix.ApplyFrames(batches[0], peer, t0) // junk-0 claims the IP
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := processCPU()
	for i := range b.N {
		ix.ApplyFrames(batches[i%pool], peer, t0)
	}
	b.StopTimer()
	events := float64(b.N * perBatch)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/events, "ns/event")
	if cpu1, _ := processCPU(); cpuOK {
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/events, "cpu-ns/event")
	}
}
