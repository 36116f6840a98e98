// Command tracestat reads an execution trace of a picker (extload -server-trace) and says
// how long one goroutine held its P in one uninterrupted stretch, and how much of the other
// goroutines' waiting to run those stretches cover: the tail term of a goroutine that does
// a batch of work at once while others become ready (decision 1160).
//
//	go run . -marker 'lmcache.(*Server).servePull' picker.trace
//
// A busy period of the marked goroutine runs from when it starts running until it blocks
// or yields; a cgo call or system call in between counts as holding the P unless another
// goroutine starts running meanwhile (the P was taken from it), which ends the period.
// Times are the trace's wall clock: on a shared machine they include the time the kernel
// gave other processes. It is its own module, so that the project's module does not
// depend on golang.org/x/exp.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

type span struct{ a, b trace.Time }

func main() {
	marker := flag.String("marker", "lmcache.(*Server).servePull", "a function in the stacks of the goroutine to measure (suffix of its full name)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: tracestat [-marker FUNC] TRACE")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *marker, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tracestat:", err)
		os.Exit(1)
	}
}

// stats is what run gathers from a trace.
type stats struct {
	wall   time.Duration
	marked int
	busy   []span                // the marked goroutines' busy periods, in order
	waits  map[trace.GoID][]span // every other goroutine's runnable intervals
}

func run(path, marker string, out io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := read(f, marker)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.marked == 0 {
		return fmt.Errorf("%s: no goroutine has %q in its stacks: pass the function with -marker", path, marker)
	}
	report(out, st)
	return nil
}

func read(r io.Reader, marker string) (*stats, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("not an execution trace this reader knows (go tool trace reads it?): %w", err)
	}
	type open struct {
		from trace.Time
		p    trace.ProcID
	}
	marked := map[trace.GoID]bool{}
	readyAt := map[trace.GoID]trace.Time{}
	busyFrom := map[trace.GoID]open{}       // the period each goroutine holding a P began
	holder := map[trace.ProcID]trace.GoID{} // the goroutine each P's open period is of
	busy := map[trace.GoID][]span{}
	waits := map[trace.GoID][]span{}
	end := func(g trace.GoID, t trace.Time) {
		if o, ok := busyFrom[g]; ok {
			busy[g] = append(busy[g], span{o.from, t})
			delete(busyFrom, g)
			if holder[o.p] == g {
				delete(holder, o.p)
			}
		}
	}
	var first, last trace.Time
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if first == 0 {
			first = ev.Time()
		}
		last = ev.Time()
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		g, t := st.Resource.Goroutine(), ev.Time()
		from, to := st.Goroutine()
		mark(marked, g, st.Stack, marker)                // the goroutine making the transition
		mark(marked, ev.Goroutine(), ev.Stack(), marker) // the one running, which may make another's
		switch {
		case to == trace.GoRunning:
			p := ev.Proc()
			if h, ok := holder[p]; ok && h != g {
				end(h, t) // another goroutine runs on its P: it no longer holds it
			}
			if _, ok := busyFrom[g]; !ok || from != trace.GoSyscall {
				busyFrom[g] = open{t, p}
			}
			holder[p] = g
			if a, ok := readyAt[g]; ok && from == trace.GoRunnable {
				waits[g] = append(waits[g], span{a, t})
			}
		case from == trace.GoRunning && to != trace.GoSyscall, from == trace.GoSyscall:
			end(g, t)
		}
		if to == trace.GoRunnable {
			readyAt[g] = t
		} else {
			delete(readyAt, g)
		}
	}
	out := &stats{wall: time.Duration(last - first), marked: len(marked), waits: map[trace.GoID][]span{}}
	for g, ss := range busy {
		if marked[g] {
			out.busy = append(out.busy, ss...)
		}
	}
	for g, ws := range waits {
		if !marked[g] {
			out.waits[g] = ws
		}
	}
	slices.SortFunc(out.busy, func(x, y span) int { return int(x.a - y.a) })
	return out, nil
}

// mark marks g when a frame of stk is marker's.
func mark(marked map[trace.GoID]bool, g trace.GoID, stk trace.Stack, marker string) {
	if g == trace.NoGoroutine || marked[g] {
		return
	}
	for fr := range stk.Frames() {
		if strings.HasSuffix(fr.Func, marker) {
			marked[g] = true
			return
		}
	}
}

func report(out io.Writer, st *stats) {
	fmt.Fprintf(out, "trace %v; marked goroutines %d\n", st.wall.Round(time.Millisecond), st.marked)
	busy := make([]time.Duration, len(st.busy))
	for i, s := range st.busy {
		busy[i] = time.Duration(s.b - s.a)
	}
	dist(out, "marked busy periods", busy)
	var waits, less, perG, perGLess, perGOver []time.Duration
	var total, over time.Duration
	for _, ws := range st.waits {
		var g, gOver time.Duration
		for _, w := range ws {
			d, o := time.Duration(w.b-w.a), overlap(w, st.busy)
			waits, less = append(waits, d), append(less, d-o)
			g, gOver = g+d, gOver+o
		}
		perG, perGLess, perGOver = append(perG, g), append(perGLess, g-gOver), append(perGOver, gOver)
		total, over = total+g, over+gOver
	}
	dist(out, "other goroutines' runnable waits", waits)
	dist(out, "  the same, less what marked busy periods cover", less)
	dist(out, "a goroutine's runnable waits, summed over its life", perG)
	dist(out, "  the same, less what marked busy periods cover", perGLess)
	dist(out, "  what marked busy periods cover of it", perGOver)
	share := 0.0
	if total > 0 {
		share = 100 * float64(over) / float64(total)
	}
	fmt.Fprintf(out, "marked busy periods cover %v of the other goroutines' %v runnable (%.2f%%)\n", over.Round(time.Microsecond), total.Round(time.Microsecond), share)
}

func dist(out io.Writer, what string, ds []time.Duration) {
	if len(ds) == 0 {
		fmt.Fprintf(out, "%s: none\n", what)
		return
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	fmt.Fprintf(out, "%s: n %d, sum %v, p50 %v, p90 %v, p99 %v, p99.9 %v, max %v\n", what, len(ds),
		sum.Round(time.Microsecond), q(.5), q(.9), q(.99), q(.999), ds[len(ds)-1])
}

// overlap is how much of w the sorted, disjoint spans ss cover.
func overlap(w span, ss []span) time.Duration {
	i := sort.Search(len(ss), func(i int) bool { return ss[i].b > w.a })
	var o time.Duration
	for ; i < len(ss) && ss[i].a < w.b; i++ {
		if a, b := max(ss[i].a, w.a), min(ss[i].b, w.b); b > a {
			o += time.Duration(b - a)
		}
	}
	return o
}
