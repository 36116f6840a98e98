package picker

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lmcache"
)

// benchFleet is n endpoints on distinct IPs, each an LMCache instance registered with the
// real index; holders of them (every n/holders-th) hold every chunk of a 1,578-token
// prompt, in order of their position. Loads are uneven (0 to 3 requests in flight), as a
// busy fleet's are, so the ranking has both ties and differences to sort out.
type benchFleet struct {
	addrs  []string
	fleet  *fleet.Set
	index  *lmcache.Index
	tokens []uint32
	holder []string // the holders' addresses, in admission order
}

func newBenchFleet(b testing.TB, n, holders int) *benchFleet {
	b.Helper()
	keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: 256, Format: lmcache.KeyFormatV03}
	idx, err := lmcache.NewIndex(lmcache.IndexConfig{Keys: keys})
	if err != nil {
		b.Fatal(err)
	}
	bf := &benchFleet{addrs: make([]string, n), index: idx, tokens: make([]uint32, 1578)}
	for i := range bf.tokens {
		bf.tokens[i] = uint32(1000 + i*7%50000)
	}
	chunkKeys := idx.ChunkKeys(bf.tokens)
	for i := range bf.addrs {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		bf.addrs[i] = ip + ":8000"
		inst := fmt.Sprintf("vllm-%d", i)
		if err := idx.Apply(lmcache.RegisterMsg{InstanceID: inst, IP: ip, Port: 8000}, benchNow); err != nil {
			b.Fatal(err)
		}
		if i%(n/holders) != 0 || len(bf.holder) == holders {
			continue
		}
		bf.holder = append(bf.holder, bf.addrs[i])
		ops := make([]lmcache.KVOp, len(chunkKeys))
		for j, k := range chunkKeys {
			ops[j] = lmcache.KVOp{Op: lmcache.OpAdmit, Key: k}
		}
		if err := idx.Apply(lmcache.BatchedKVOperationMsg{InstanceID: inst, Location: "LocalCPUBackend", Operations: ops}, benchNow); err != nil {
			b.Fatal(err)
		}
	}
	bf.fleet = newFleet(bf.addrs...)
	for i, a := range bf.addrs {
		for range i % 4 {
			if _, err := bf.fleet.Book(a); err != nil {
				b.Fatal(err)
			}
		}
	}
	return bf
}

// BenchmarkPickLMCache is one decision of the default policy (loadaware, one endpoint
// returned) for 1,578 token ids given in the request, against the real LMCache index, at
// 2, 256, 1k and 10k endpoints with 2 holders and with every third endpoint holding the
// prompt. It reports the latency distribution of the decisions beside the mean: wall
// clock (p50-ns, p99-ns) and, on Linux, the CPU time of the benchmark's thread
// (p50-cpu-ns, p99-cpu-ns), which leaves out the time slices other processes take on a
// shared machine. Run it with -cpu 1 so the decisions stay on one thread.
func BenchmarkPickLMCache(b *testing.B) { benchPickLMCache(b, false) }

// BenchmarkPickIntoLMCache is BenchmarkPickLMCache through PickInto, with one Decision
// reused from decision to decision, as a caller that keeps one per worker would.
func BenchmarkPickIntoLMCache(b *testing.B) { benchPickLMCache(b, true) }

func benchPickLMCache(b *testing.B, into bool) {
	for _, n := range []int{2, 256, 1000, 10000} {
		for _, holders := range []int{2, n / 3} {
			if holders < 2 || (n == 2 && holders != 2) {
				continue
			}
			b.Run(fmt.Sprintf("endpoints=%d/holders=%d", n, holders), func(b *testing.B) {
				bf := newBenchFleet(b, n, holders)
				p := newPicker(b, Options{Fleet: bf.fleet, Cache: LMCacheView{Index: bf.index}})
				req := Request{Tokens: bf.tokens}
				d, err := p.Pick(context.Background(), req)
				if err != nil {
					b.Fatal(err)
				}
				if d.Ranked[0].Matched != len(bf.tokens) || !slices.Contains(bf.holder, d.Endpoints[0]) {
					b.Fatalf("the first decision went to %s with %d tokens matched: the benchmark is not measuring a cache hit", d.Endpoints[0], d.Ranked[0].Matched)
				}
				d.Booking.Release()
				// One release closure, made once: a closure per decision capturing the
				// Decision would put 160 B of the benchmark's own on each decision's bill.
				var reused Decision
				release := func() { reused.Booking.Release() }
				timeEach(b, func() func() {
					if into {
						if err := p.PickInto(context.Background(), req, &reused); err != nil {
							b.Fatal(err)
						}
						return release
					}
					var err error
					if reused, err = p.Pick(context.Background(), req); err != nil {
						b.Fatal(err)
					}
					return release
				})
			})
		}
	}
}

// timeEach runs op once per iteration on a locked OS thread, after a collection, and
// reports the calls' wall-clock (p50-ns, p99-ns) and thread CPU time (p50-cpu-ns,
// p99-cpu-ns) quantiles and, on Linux, the share of calls during which the thread took a
// page fault (faulted-%): a share near or over 1% puts the fault's cost in the p99.
// op returns what to do after its timing (nil: nothing).
func timeEach(b *testing.B, op func() func()) {
	b.Helper()
	// The samples' pages are touched before timing: each call's faults and CPU time are
	// read before its samples are appended, and a first touch of the slices is not the
	// call's.
	lat := make([]time.Duration, 1<<16)
	cpu := make([]time.Duration, 1<<16)
	clear(lat)
	clear(cpu)
	lat, cpu = lat[:0], cpu[:0]
	faulted := 0
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	runtime.GC()
	warmUp(op)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		f0, faultsOK := threadFaults()
		c0, cpuOK := threadCPU()
		t := time.Now()
		after := op()
		d := time.Since(t)
		c1, _ := threadCPU()
		f1, _ := threadFaults()
		lat = append(lat, d)
		if cpuOK {
			cpu = append(cpu, c1-c0)
		}
		if faultsOK && f1 > f0 {
			faulted++
		}
		if after != nil {
			after()
		}
	}
	reportQuantiles(b, lat, "")
	if len(cpu) > 0 {
		reportQuantiles(b, cpu, "-cpu")
	}
	if _, ok := threadFaults(); ok {
		b.ReportMetric(100*float64(faulted)/float64(len(lat)), "faulted-%")
	}
}

// warmUp runs op untimed until the collector has finished two cycles since it began (or
// for one second at most), so that the timed calls find the heap as a running server's is:
// grown to its goal, its pages touched and reused. Timed from a fresh heap instead, every
// call that allocates a new page takes that page's first fault (faulted-%).
func warmUp(op func() func()) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cycles, deadline := ms.NumGC+2, time.Now().Add(time.Second)
	for i := 0; ; i++ {
		if after := op(); after != nil {
			after()
		}
		if i%256 == 255 {
			if runtime.ReadMemStats(&ms); ms.NumGC >= cycles || time.Now().After(deadline) {
				return
			}
		}
	}
}

// reportQuantiles reports the p50 and p99 of lat (one sample per iteration) as
// p50<kind>-ns and p99<kind>-ns.
func reportQuantiles(b *testing.B, lat []time.Duration, kind string) {
	b.Helper()
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))].Nanoseconds()) }
	b.ReportMetric(q(0.5), "p50"+kind+"-ns")
	b.ReportMetric(q(0.99), "p99"+kind+"-ns")
}

// BenchmarkFloor is the machine's own tail, for reading BenchmarkPickLMCache's: a fixed
// amount of work (sums over a buffer as large as a decision's working set), timed the
// same way. Its p99/p50 is what this machine adds to any operation of that length; a
// decision's p99 above that ratio is the decision's own.
func BenchmarkFloor(b *testing.B) {
	for _, kb := range []int{32, 128, 1024} {
		b.Run(fmt.Sprintf("working-set=%dKiB", kb), func(b *testing.B) {
			buf := make([]uint64, kb<<7)
			for i := range buf {
				buf[i] = uint64(i)
			}
			var sink uint64
			timeEach(b, func() func() {
				for pass := range 4 {
					for i, x := range buf {
						sink += x ^ uint64(i+pass)
					}
				}
				return nil
			})
			if sink == 42 {
				b.Log(sink)
			}
		})
	}
}

// BenchmarkPickSubset is BenchmarkPickLMCache's 10k-endpoint, 2-holder decision with a
// gateway subset hint of three entries (two addresses, one IP alone): the candidates are
// found in the fleet by search, and the cache answers for them without a new list.
func BenchmarkPickSubset(b *testing.B) {
	bf := newBenchFleet(b, 10000, 2)
	p := newPicker(b, Options{Fleet: bf.fleet, Cache: LMCacheView{Index: bf.index}})
	req := Request{Tokens: bf.tokens, Subset: []string{bf.addrs[0], bf.addrs[5000], "10.0.0.7"}}
	d, err := p.Pick(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	if d.Endpoints[0] != bf.addrs[0] || len(d.Ranked) != 3 {
		b.Fatalf("decision %v over %d candidates, want %s over 3", d.Endpoints, len(d.Ranked), bf.addrs[0])
	}
	d.Booking.Release()
	b.ReportAllocs()
	for b.Loop() {
		d, err := p.Pick(context.Background(), req)
		if err != nil {
			b.Fatal(err)
		}
		d.Booking.Release()
	}
}

// BenchmarkPickCold is one decision for a prompt no endpoint holds (loadaware, as
// BenchmarkPickLMCache, and kvaware): both take the QPS fallback over the whole fleet.
// Every decision is booked and released, so the request rates it ranks by move.
func BenchmarkPickCold(b *testing.B) {
	for _, n := range []int{256, 10000} {
		for _, policy := range []string{"loadaware", "kvaware"} {
			b.Run(fmt.Sprintf("endpoints=%d/policy=%s", n, policy), func(b *testing.B) {
				bf := newBenchFleet(b, n, 2)
				p := newPicker(b, Options{Fleet: bf.fleet, Policy: policy, Cache: LMCacheView{Index: bf.index}})
				cold := make([]uint32, len(bf.tokens))
				for i := range cold {
					cold[i] = uint32(3 + i)
				}
				req := Request{Tokens: cold}
				timeEach(b, func() func() {
					d, err := p.Pick(context.Background(), req)
					if err != nil {
						b.Fatal(err)
					}
					if d.Ranked[0].Reason != "qps-fallback" {
						b.Fatalf("reason %s: the benchmark is not measuring the QPS fallback", d.Ranked[0].Reason)
					}
					return func() { d.Booking.Release() }
				})
			})
		}
	}
}

// BenchmarkPickIntoWithHealth is BenchmarkPickIntoLMCache at 10k endpoints as app runs
// it, with health kept (fleet.Health): every endpoint healthy, and one of them ejected
// (the decision then goes among the others, a subset of the view).
func BenchmarkPickIntoWithHealth(b *testing.B) {
	const n = 10000
	for _, holders := range []int{2, n / 3} {
		for _, ejected := range []int{0, 1} {
			b.Run(fmt.Sprintf("endpoints=%d/holders=%d/ejected=%d", n, holders, ejected), func(b *testing.B) {
				bf := newBenchFleet(b, n, holders)
				now := time.Now()
				h := fleet.NewHealth(fleet.HealthPolicy{PassiveFailures: 1, Ejection: time.Hour})
				addrs := bf.fleet.View().Addrs()
				for _, a := range addrs {
					h.Passive(a, true, "", now, now)
				}
				var out string // an endpoint that holds nothing
				for _, a := range addrs {
					if !slices.Contains(bf.holder, a) {
						out = a
						break
					}
				}
				if ejected > 0 {
					h.Passive(out, false, "", now, now)
				}
				p := newPicker(b, Options{Fleet: bf.fleet, Cache: LMCacheView{Index: bf.index}, Health: h})
				req := Request{Tokens: bf.tokens}
				var d Decision
				if err := p.PickInto(context.Background(), req, &d); err != nil {
					b.Fatal(err)
				}
				if d.Ranked[0].Matched != len(bf.tokens) || d.Candidates != n-ejected {
					b.Fatalf("the first decision: %d tokens matched among %d candidates, want %d among %d", d.Ranked[0].Matched, d.Candidates, len(bf.tokens), n-ejected)
				}
				d.Booking.Release()
				timeEach(b, func() func() {
					if err := p.PickInto(context.Background(), req, &d); err != nil {
						b.Fatal(err)
					}
					return func() { d.Booking.Release() }
				})
			})
		}
	}
}
