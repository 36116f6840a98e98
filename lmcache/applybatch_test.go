package lmcache

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkApplyBatch7 is the in-process share of one LMCache batch as extload's feeder
// sends it: 7 KVAdmitMsg frames of new keys from an instance registered on the batch's
// peer IP, into an index with a MissDetector (as the picker builds it). One iteration is
// one batch. decode is Decode of the 7 frames alone; apply is ApplyFrames (decode, key
// fill, index insert, detector, metrics). The receive from ZeroMQ and the wake-ups are not
// in it (BenchmarkServerIngestPaced). The frames are encoded before the clock starts, at
// most 1<<17 batches; beyond that they repeat (admits of keys held already).
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
		for i := range b.N {
			if n := ix.ApplyFrames(batches[i%len(batches)], peer, t0); n != perBatch {
				b.Fatal(fmt.Sprintf("applied %d of %d frames", n, perBatch))
			}
		}
	})
}
