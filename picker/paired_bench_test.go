package picker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/tokenize"
)

// pairedSamples is the most rounds a paired benchmark keeps without growing its sample
// slices in the timed loop: run it with -benchtime Nx, N at most this.
const pairedSamples = 1 << 16

// pairedArm is one policy of a paired measurement: its own picker and fleet (so one
// policy's bookings never move another's ranking), one Decision reused from round to
// round (PickInto), extra work a control arm adds after each decision, and the rounds'
// samples in round order (sample i of every arm is from round i).
type pairedArm struct {
	name  string
	p     *Picker
	d     Decision
	extra int // spin iterations added after each decision (the slowed control)
	wall  []time.Duration
	cpu   []time.Duration
}

// pick makes one decision for prompt and adds the arm's extra work: what is timed.
func (a *pairedArm) pick(b *testing.B, prompt string) {
	if err := a.p.PickInto(context.Background(), Request{Prompt: prompt}, &a.d); err != nil {
		b.Fatal(err)
	}
	if a.extra > 0 {
		spinSink ^= spin(a.extra)
	}
}

// release is what follows a decision untimed: its first token arrives and its booking is
// released, so the endpoints' paces are measured as in a running fleet.
func (a *pairedArm) release() {
	a.d.Booking.Decoding()
	a.d.Booking.Release()
}

// spinSink keeps spin's result alive so that the compiler cannot drop the work.
var spinSink uint64

// spin is n rounds of xorshift64: a fixed amount of CPU work with no memory traffic.
func spin(n int) uint64 {
	x := uint64(88172645463325252)
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// pairedPolicies are the arms of BenchmarkPickPaired: the first is the baseline every
// ratio is taken against; the last is loadaware slowed on purpose (the control).
var pairedPolicies = []string{"loadaware", "ttftaware", "latencyaware", "kvaware", "loadaware+slowed"}

// BenchmarkPickPaired measures issue 32's decision-cost target: `Pick` p99 of ttftaware for
// the 1,578-token text prompt within 10% of loadaware's, at 256 endpoints within 2x. One
// round makes one decision of every arm (loadaware, ttftaware, latencyaware, kvaware and the
// control, loadaware followed by added work) on the same prompt, in an order drawn afresh
// each round, on one locked OS thread, so that the host's noise lands on every arm alike.
// Each arm has its own fleet (the same endpoints and uneven loads: 0-3 requests in flight)
// and its own LMCache index (the same contents: two endpoints hold the prompt's prefix);
// all share one Qwen2.5 tokenizer (warm piece cache), as BenchmarkPickText1578. Decisions
// go through PickInto with one Decision per arm, and each is booked, decodes and is
// released untimed.
//
// It reports per arm the wall-clock p50 and p99 (p50-ARM-ns, p99-ARM-ns) and the CPU
// time p99 of the thread (p99-cpu-ARM-ns), and per arm against loadaware the ratio of
// p99s with a 90% paired bootstrap interval over blocks of 64 consecutive rounds
// (ARM/loadaware-p99, -lo, -hi; the same three for CPU time). The control adds spin work
// of a quarter of loadaware's CPU-time p99 over the warm-up rounds, played as the timed
// ones are (slowed-add-ns; the wall clock's where the thread's CPU time is not read), so
// its ratio must come out near 1.25 with an interval above 1.1: if it does not, the
// measurement cannot resolve the target. Beside them: allocations per decision per arm
// (allocs-ARM) and the collector's cycles during the timed rounds (gc-cycles).
// Run it with -cpu 1 and -benchtime Nx, N at most 65,536.
func BenchmarkPickPaired(b *testing.B) {
	for _, n := range []int{2, 256} {
		b.Run(fmt.Sprintf("prompt=text1578/endpoints=%d", n), func(b *testing.B) {
			benchPickPaired(b, n)
		})
	}
}

func benchPickPaired(b *testing.B, n int) {
	qwen := loadQwenB(b)
	newIndex, addrs, prompts := newTextBench(b, qwen, n)
	now := benchNow
	clock := func() time.Time { return now }
	arms := make([]*pairedArm, len(pairedPolicies))
	for i, name := range pairedPolicies {
		f := newFleet(addrs...)
		f.SetClock(clock)
		for j, a := range addrs {
			for range j % 4 {
				if _, err := f.Book(a); err != nil {
					b.Fatal(err)
				}
			}
		}
		policy, _, _ := strings.Cut(name, "+")
		p := newPicker(b, Options{Fleet: f, Policy: policy, Cache: LMCacheView{Index: newIndex()},
			Tokenizer: &Tokens{Local: qwen}, Now: clock})
		arms[i] = &pairedArm{name: name, p: p,
			wall: make([]time.Duration, pairedSamples), cpu: make([]time.Duration, pairedSamples)}
		if err := p.PickInto(context.Background(), Request{Prompt: prompts[0]}, &arms[i].d); err != nil {
			b.Fatal(err)
		}
		if d := arms[i].d; d.PromptTokens < 1500 || d.Ranked[0].Matched < 1280 {
			b.Fatalf("%s: prompt of %d tokens matched %d: the benchmark is not measuring a cache hit", name, d.PromptTokens, d.Ranked[0].Matched)
		}
		arms[i].release()
	}
	for _, a := range arms {
		clear(a.wall) // touched before timing: a first touch is not the decision's
		clear(a.cpu)
		a.wall, a.cpu = a.wall[:0], a.cpu[:0]
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	round := 0
	order := make([]int, len(arms))
	rng := rand.New(rand.NewPCG(1, 2))
	play := func() {
		round++
		now = now.Add(time.Millisecond)
		prompt := prompts[round%len(prompts)]
		for i := range order {
			order[i] = i
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			a := arms[k]
			c0, _ := threadCPU()
			t := time.Now()
			a.pick(b, prompt)
			w := time.Since(t)
			c1, _ := threadCPU()
			a.wall = append(a.wall, w)
			a.cpu = append(a.cpu, c1-c0)
			a.release()
		}
	}
	warmUp(func() func() { play(); return nil })
	slowed := arms[len(arms)-1]
	base := quantile(arms[0].cpu, 0.99)
	if base == 0 {
		base = quantile(arms[0].wall, 0.99)
	}
	slowed.extra = spinFor(base / 4)
	add := timeSpin(slowed.extra)
	for _, a := range arms {
		a.wall, a.cpu = a.wall[:0], a.cpu[:0]
	}

	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	gc0 := ms.NumGC
	b.ResetTimer()
	for b.Loop() {
		play()
	}
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.NumGC-gc0), "gc-cycles")
	b.ReportMetric(float64(add.Nanoseconds()), "slowed-add-ns")

	boot := rand.New(rand.NewPCG(3, 4))
	for _, a := range arms {
		b.ReportMetric(float64(quantile(a.wall, 0.5).Nanoseconds()), "p50-"+a.name+"-ns")
		b.ReportMetric(float64(quantile(a.wall, 0.99).Nanoseconds()), "p99-"+a.name+"-ns")
		b.ReportMetric(float64(quantile(a.cpu, 0.99).Nanoseconds()), "p99-cpu-"+a.name+"-ns")
		if a == arms[0] {
			continue
		}
		for _, kind := range []struct {
			unit       string
			base, this []time.Duration
		}{{"-p99", arms[0].wall, a.wall}, {"-p99-cpu", arms[0].cpu, a.cpu}} {
			r := pairedP99Ratio(kind.base, kind.this, 64, 1000, boot)
			unit := a.name + "/loadaware" + kind.unit
			b.ReportMetric(r.ratio, unit)
			b.ReportMetric(r.lo, unit+"-lo")
			b.ReportMetric(r.hi, unit+"-hi")
		}
	}
	for _, a := range arms {
		i := 0
		allocs := testing.AllocsPerRun(200, func() {
			i++
			a.pick(b, prompts[i%len(prompts)])
			a.release()
		})
		b.ReportMetric(allocs, "allocs-"+a.name)
	}
}

// newTextBench is BenchmarkPickText1578's prompt on n endpoints: a maker of LMCache
// indexes with every endpoint registered and two of them (the first and the middle one)
// holding every chunk of the ~1,578-token prefix, and 64 prompts that share the prefix
// and differ in a trailing question, as routed traffic does. Each arm needs an index of
// its own: an index keeps the endpoint list of its last lookup, and arms with fleets of
// their own would make every lookup rebuild it, a cost no deployment has.
func newTextBench(b *testing.B, qwen *tokenize.Tokenizer, n int) (func() *lmcache.Index, []string, []string) {
	b.Helper()
	keys := lmcache.KeyConfig{HashSeed: "123", ChunkSize: 256, Format: lmcache.KeyFormatV03}
	words := strings.Fields("the quick brown fox jumps over a lazy dog while engines cache prefixes of long prompts for routing")
	var sb strings.Builder
	for i := 0; sb.Len() < 8450; i++ {
		sb.WriteString(words[(i*7)%len(words)] + " ")
	}
	prefix := sb.String()
	h, err := lmcache.NewHasher(keys)
	if err != nil {
		b.Fatal(err)
	}
	chunkKeys := h.ChunkKeys(qwen.Encode(prefix, true))
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d:8000", i>>16&255, i>>8&255, i&255)
	}
	newIndex := func() *lmcache.Index {
		idx, err := lmcache.NewIndex(lmcache.IndexConfig{Keys: keys})
		if err != nil {
			b.Fatal(err)
		}
		for i, a := range addrs {
			inst := fmt.Sprintf("vllm-%d", i)
			ip, _, _ := strings.Cut(a, ":")
			if err := idx.Apply(lmcache.RegisterMsg{InstanceID: inst, IP: ip, Port: 8000}, benchNow); err != nil {
				b.Fatal(err)
			}
			if i != 0 && i != n/2 {
				continue
			}
			for _, k := range chunkKeys {
				if err := idx.Apply(lmcache.KVAdmitMsg{InstanceID: inst, Key: k, Location: "LocalCPUBackend"}, benchNow); err != nil {
					b.Fatal(err)
				}
			}
		}
		return idx
	}
	prompts := make([]string, 64)
	for i := range prompts {
		prompts[i] = prefix + fmt.Sprintf("\n[Q-%06d] What does the passage above say about item %d?", i, i)
	}
	return newIndex, addrs, prompts
}

// spinFor returns the spin iterations that take d, timed on the least of five probes.
func spinFor(d time.Duration) int {
	const probe = 1 << 20
	per := timeSpin(probe)
	return max(1, int(float64(d)/float64(per)*probe))
}

// timeSpin is the least wall-clock time of five runs of spin(n).
func timeSpin(n int) time.Duration {
	best := time.Duration(1<<63 - 1)
	for range 5 {
		t := time.Now()
		spinSink ^= spin(n)
		best = min(best, time.Since(t))
	}
	return best
}

// p99Ratio is a ratio of p99s, this over base, with its bootstrap interval.
type p99Ratio struct{ ratio, lo, hi float64 }

// pairedP99Ratio returns p99(this)/p99(base) over all samples and its 90% bootstrap
// interval (the 5th and 95th percentiles of resamples ratios): each resample draws
// len/block blocks of block consecutive rounds with replacement, the same blocks for
// both, so a stretch of rounds the host slowed weighs on both sides of the ratio.
// base and this hold one sample per round, in round order, and have the same length;
// with fewer than two blocks the interval is the point itself.
func pairedP99Ratio(base, this []time.Duration, block, resamples int, rng *rand.Rand) p99Ratio {
	n := min(len(base), len(this))
	point := ratioOf(quantile(this[:n], 0.99), quantile(base[:n], 0.99))
	blocks := n / block
	if blocks < 2 {
		return p99Ratio{point, point, point}
	}
	sb := make([]time.Duration, 0, blocks*block)
	st := make([]time.Duration, 0, blocks*block)
	rs := make([]float64, resamples)
	for r := range rs {
		sb, st = sb[:0], st[:0]
		for range blocks {
			k := rng.IntN(blocks) * block
			sb = append(sb, base[k:k+block]...)
			st = append(st, this[k:k+block]...)
		}
		rs[r] = ratioOf(selectKth(st, quantileIndex(len(st), 0.99)), selectKth(sb, quantileIndex(len(sb), 0.99)))
	}
	lo, hi := quantileFloat(rs, 0.05), quantileFloat(rs, 0.95)
	return p99Ratio{point, lo, hi}
}

func ratioOf(num, den time.Duration) float64 {
	return float64(num) / float64(max(den, 1))
}

// quantileIndex is the index of the f-quantile among n sorted samples, as reportQuantiles
// takes it.
func quantileIndex(n int, f float64) int { return min(n-1, int(f*float64(n))) }

// quantile is the f-quantile of s (reportQuantiles' rule) without reordering s.
func quantile(s []time.Duration, f float64) time.Duration {
	c := append([]time.Duration(nil), s...)
	return selectKth(c, quantileIndex(len(c), f))
}

func quantileFloat(s []float64, f float64) float64 {
	c := append([]float64(nil), s...)
	return selectKth(c, quantileIndex(len(c), f))
}

// selectKth returns the k-th smallest element of s (from 0), reordering s: Hoare's
// selection, linear on average.
func selectKth[T int64 | float64 | time.Duration](s []T, k int) T {
	lo, hi := 0, len(s)-1
	for lo < hi {
		p := s[lo+(hi-lo)/2]
		i, j := lo, hi
		for i <= j {
			for s[i] < p {
				i++
			}
			for s[j] > p {
				j--
			}
			if i <= j {
				s[i], s[j] = s[j], s[i]
				i++
				j--
			}
		}
		switch {
		case k <= j:
			hi = j
		case k >= i:
			lo = i
		default:
			return s[k]
		}
	}
	return s[k]
}
