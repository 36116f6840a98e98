package kvindex

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const benchBlock = 16 // vLLM's default block size

// chainEvents returns batches of one BlockStored each, perBatch blocks long, covering
// blocks distinct chains of chainLen blocks (every chain starts with its own token).
func chainEvents(blocks, perBatch, chainLen int) []Event {
	var out []Event
	hash := uint64(1)
	for c := 0; c*chainLen < blocks; c++ {
		var parent uint64
		for b := 0; b < chainLen && c*chainLen+b < blocks; b += perBatch {
			n := min(perBatch, chainLen-b, blocks-c*chainLen-b)
			ev := Event{Kind: BlockStored, BlockSize: benchBlock, Medium: "GPU", Tokens: make([]uint32, n*benchBlock)}
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

// BenchmarkIndexBytesPerBlock measures the heap the index holds per indexed block at
// 10^6 blocks (chains of 64 blocks, one endpoint).
func BenchmarkIndexBytesPerBlock(b *testing.B) {
	const blocks = 1_000_000
	evs := chainEvents(blocks, 64, 64)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ix, _ := NewIndex(IndexConfig{Seed: 1})
		for i := range evs {
			ix.applyEvent(streamID{"10.0.0.1:8000", 0}, &evs[i])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if ix.Blocks() != blocks {
			b.Fatalf("%d blocks indexed", ix.Blocks())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/blocks, "B/block")
		runtime.KeepAlive(ix)
	}
}

// BenchmarkLookupWhileIngesting measures Match of a 1,578-token prompt over 16
// endpoints at 10^6 indexed blocks while another goroutine keeps storing and removing
// blocks at 10^6 block events a second, and reports the p50, p90, p99 and p99.9 of single
// lookups. Two endpoints hold the prompt's whole 98 full blocks, the others a prefix of 8
// to 64 blocks. The garbage of the setup is collected before timing (otherwise the
// collector's background work lands in the idle p99; docs/decisions/0805). The append
// runs look up with AppendMatch into one reused result, as the picker does. The keyed
// runs put a LoRA adapter and data-parallel ranks in the key: every endpoint runs two
// ranks, the prompt's blocks are stored under an adapter (on rank 0 or 1 by endpoint),
// and lookups ask AppendMatchKey for that adapter.
func BenchmarkLookupWhileIngesting(b *testing.B) {
	for _, rate := range []float64{0, 1e6} {
		b.Run(fmt.Sprintf("ingest=%g/s", rate), func(b *testing.B) { lookupWhileIngesting(b, rate, false, false) })
	}
	for _, rate := range []float64{0, 1e6} {
		b.Run(fmt.Sprintf("ingest=%g/s/append", rate), func(b *testing.B) { lookupWhileIngesting(b, rate, true, false) })
	}
	for _, rate := range []float64{0, 1e6} {
		b.Run(fmt.Sprintf("ingest=%g/s/append/keyed", rate), func(b *testing.B) { lookupWhileIngesting(b, rate, true, true) })
	}
}

func lookupWhileIngesting(b *testing.B, ingestRate float64, reuse, keyed bool) {
	const eps = 16
	ix, _ := NewIndex(IndexConfig{Seed: 1, ExtraKeys: keyed})
	var key Key
	ranks := 1
	if keyed {
		key, ranks = Key{Adapter: "sql-lora"}, 2
	}
	names := make([]string, eps)
	for i := range names {
		names[i] = "10.0.0." + strconv.Itoa(i+1) + ":8000"
	}
	bg := chainEvents(1_000_000-eps*50, 64, 64)
	for i := range bg {
		ix.applyEvent(streamID{names[i%eps], i / eps % ranks}, &bg[i])
	}
	prompt := make([]uint32, 1578)
	for i := range prompt {
		prompt[i] = uint32(900000 + i)
	}
	full := len(prompt) / benchBlock
	for i, ep := range names {
		n := full
		if i >= 2 {
			n = 8 + (i*4)%57
		}
		ev := Event{Kind: BlockStored, BlockSize: benchBlock, Medium: "GPU", Tokens: prompt[:n*benchBlock], LoRAName: key.Adapter}
		for j := 0; j < n; j++ {
			ev.Hashes = append(ev.Hashes, uint64(1<<40+j))
		}
		ix.Apply(ep, Batch{DPRank: i % ranks, Events: []Event{ev}})
	}
	if m := ix.MatchKey(prompt, key, names); m[0].Matched != full*benchBlock {
		b.Fatalf("setup: %+v", m[0])
	}
	churn := chainEvents(64*1000, 64, 64)
	for i := range churn {
		for j := range churn[i].Hashes {
			churn[i].Hashes[j] += 1 << 50
		}
		churn[i].Parent += 1 << 50
	}
	var stop atomic.Bool
	var applied atomic.Int64
	var wg sync.WaitGroup
	// The writer stores and removes 64-block chains at ingestRate block events a second
	// (the ingestion target), paced so the lookups share the lock as they would in service.
	wg.Go(func() {
		start := time.Now()
		for k := 0; ingestRate > 0 && !stop.Load(); k++ {
			ev := &churn[k%len(churn)]
			id := streamID{names[k%eps], k / eps % ranks}
			ix.applyEvent(id, ev)
			ix.applyEvent(id, &Event{Kind: BlockRemoved, Hashes: ev.Hashes, Medium: "GPU"})
			n := applied.Add(int64(2 * len(ev.Hashes)))
			if ahead := time.Duration(float64(n)/ingestRate*1e9) - time.Since(start); ahead > 0 {
				time.Sleep(ahead)
			}
		}
	})
	lat := make([]time.Duration, 0, b.N)
	var ms []Match
	runtime.GC()
	for b.Loop() {
		t0 := time.Now()
		if reuse {
			ms = ix.AppendMatchKey(ms[:0], prompt, key, names)
		} else {
			ix.Match(prompt, names)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	stop.Store(true)
	wg.Wait()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*90/100].Nanoseconds()), "p90-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(float64(lat[len(lat)*999/1000].Nanoseconds()), "p99.9-ns")
	b.ReportMetric(float64(ix.Blocks()), "blocks")
	b.ReportMetric(float64(applied.Load())/b.Elapsed().Seconds(), "churn-blocks/s")
}

// BenchmarkApplyBatches measures Apply of one-event batches: a 16-block chain stored,
// then removed (the per-batch work: the batch boundary ExportStream waits for, and the
// stream's sequence number), at 10^5 indexed blocks.
func BenchmarkApplyBatches(b *testing.B) {
	ix, _ := NewIndex(IndexConfig{Seed: 1})
	for _, ev := range chainEvents(100_000, 64, 64) {
		ix.Apply("a", Batch{Events: []Event{ev}})
	}
	churn := chainEvents(16*1000, 16, 16)
	for i := range churn {
		for j := range churn[i].Hashes {
			churn[i].Hashes[j] += 1 << 50
		}
	}
	k := 0
	for b.Loop() {
		ev := churn[k%len(churn)]
		ix.Apply("a", Batch{Seq: int64(2 * k), Events: []Event{ev}})
		ix.Apply("a", Batch{Seq: int64(2*k + 1), Events: []Event{{Kind: BlockRemoved, Hashes: ev.Hashes, Medium: "GPU"}}})
		k++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*32), "ns/block")
}

// BenchmarkApplyOverBudget measures Apply of one-event batches of 16 new blocks each
// into a stream at its budget of 10^5 blocks, so that every block stored drops the
// stream's least recently stored one (an engine that never sends BlockRemoved). Compare
// ns/block with BenchmarkApplyBatches, whose batches store and then remove.
func BenchmarkApplyOverBudget(b *testing.B) {
	const budget = 100_000
	ix, _ := NewIndex(IndexConfig{Seed: 1, MaxBlocks: budget})
	for _, ev := range chainEvents(budget, 64, 64) {
		ix.Apply("a", Batch{Events: []Event{ev}})
	}
	churn := chainEvents(16*10_000, 16, 16) // more than the budget: a block comes back after it was dropped
	for i := range churn {
		churn[i].Tokens[0] += 1 << 24 // content of its own
	}
	k := 0
	for b.Loop() {
		ev := churn[k%len(churn)]
		for j := range ev.Hashes { // new engine hashes every round: always new blocks
			ev.Hashes[j] += 1 << 50
		}
		ix.Apply("a", Batch{Seq: int64(k), Events: []Event{ev}})
		k++
	}
	if ix.Blocks() != budget {
		b.Fatalf("%d blocks held, want the budget %d", ix.Blocks(), budget)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*16), "ns/block")
}
