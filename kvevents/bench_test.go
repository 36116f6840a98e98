package kvevents_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
)

const benchBlock = 16 // vLLM's default block size

// chainEvents returns batches of one BlockStored each, perBatch blocks long, covering
// blocks distinct chains of chainLen blocks (every chain starts with its own token).
func chainEvents(blocks, perBatch, chainLen int) []kvindex.Event {
	var out []kvindex.Event
	hash := uint64(1)
	for c := 0; c*chainLen < blocks; c++ {
		var parent uint64
		for b := 0; b < chainLen && c*chainLen+b < blocks; b += perBatch {
			n := min(perBatch, chainLen-b, blocks-c*chainLen-b)
			ev := kvindex.Event{Kind: kvindex.BlockStored, BlockSize: benchBlock, Medium: "GPU", Tokens: make([]uint32, n*benchBlock)}
			for i := range ev.Tokens {
				ev.Tokens[i] = uint32(c*7919 + (b*benchBlock+i)%50000)
			}
			ev.Tokens[0] = uint32(c) // the chain's own content
			if b > 0 {
				ev.Parent, ev.HasParent = parent, true
			}
			for i := 0; i < n; i++ {
				ev.Hashes = append(ev.Hashes, hash)
				parent = hash
				hash++
			}
			out = append(out, ev)
		}
	}
	return out
}

// BenchmarkIngestLoopback measures blocks indexed per second through real ZeroMQ over
// loopback: a publisher sends batches of 64 blocks (pre-encoded, as an engine's cost),
// the subscriber receives, decodes and applies them. Run with -cpu 1 for one core of Go
// code (libzmq's I/O threads are its own).
func BenchmarkIngestLoopback(b *testing.B) {
	for _, l := range []kvevents.Layout{{}, {MapEvents: true, BytesHashes: true}} {
		b.Run(fmt.Sprintf("map=%v/bytes=%v", l.MapEvents, l.BytesHashes), func(b *testing.B) {
			const perBatch = 64
			batches := max(b.N/perBatch, 1)
			evs := chainEvents(batches*perBatch, perBatch, 1024)
			payloads := make([][]byte, len(evs))
			for i := range evs {
				payloads[i] = kvevents.Encode(kvindex.Batch{TS: 1, Events: evs[i : i+1], DPRank: 0}, l)
			}
			pubs, eps, port, _ := engines(b, 1, false, l)
			ix, _ := kvindex.NewIndex(kvindex.IndexConfig{Seed: 1})
			last := int64(len(payloads) - 1)
			done := make(chan struct{})
			sub, err := kvevents.NewSubscriber(kvevents.SubscriberConfig{Port: port, PollInterval: 10 * time.Millisecond,
				OnBatch: func(_ string, seq int64) {
					if seq == last {
						close(done)
					}
				}}, ix)
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Close()
			sub.SetEndpoints(eps)
			<-sub.Ready()
			if err := pubs[0].WaitSubscribed(10 * time.Second); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			for _, p := range payloads {
				if _, err := pubs[0].SendRaw(p); err != nil {
					b.Fatal(err)
				}
			}
			select {
			case <-done:
			case <-time.After(time.Minute):
				b.Fatal("the last batch was not applied within a minute (dropped at the high-water mark?)")
			}
			el := time.Since(start)
			b.StopTimer()
			if got := ix.Blocks(); got != len(payloads)*perBatch {
				b.Fatalf("index holds %d blocks, want %d (batches lost)", got, len(payloads)*perBatch)
			}
			b.ReportMetric(float64(len(payloads)*perBatch)/el.Seconds(), "blocks/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}
