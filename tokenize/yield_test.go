package tokenize

import (
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// With one processor a long encoding yields about every millisecond of work: in the heap
// merge of a long piece and across many small pieces of the worst shape. With more it
// never yields. Either way the ids are the same.
func TestEncodingYieldsOnlyWithOneProcessor(t *testing.T) {
	tk := loadRef(t, "qwen2_5")
	long := strings.Repeat(" ", 256<<10)    // one piece: the heap merge
	short := strings.Repeat(" ", 127) + "x" // a piece of 127 spaces, then a word
	want := map[string][]uint32{}
	for _, procs := range []int{2, 1} {
		t.Run(map[int]string{1: "one", 2: "two"}[procs], func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			for name, piece := range map[string]string{"long piece": long, "short pieces": short} {
				var y yielder
				y.start()
				var ids []uint32
				start := time.Now()
				for range (256 << 10) / len(piece) {
					ids = tk.model.encode(piece, ids, &y)
				}
				t.Logf("%s, %d processors: %d yields in %v", name, procs, y.yields, time.Since(start))
				switch {
				case procs > 1 && y.yields != 0:
					t.Errorf("%s: yielded %d times with %d processors", name, y.yields, procs)
				case procs == 1 && y.yields < 8:
					t.Errorf("%s: yielded %d times encoding 256 KiB with one processor: want about one a millisecond", name, y.yields)
				}
				if w, ok := want[name]; ok && !slices.Equal(w, ids) {
					t.Errorf("%s: the ids differ with %d processors", name, procs)
				}
				want[name] = ids
			}
		})
	}
}
