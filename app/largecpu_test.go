package app

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/internal/threadcpu"
	"github.com/loadaware/loadaware-epp/picker"
)

// cpuTokenizer busies its thread for cpu of CPU time, then returns one id a byte of the
// prompt; it counts its calls.
type cpuTokenizer struct {
	cpu   time.Duration
	calls *atomic.Int32
}

func (c cpuTokenizer) Tokenize(_ context.Context, r picker.Request, _ []string) ([]uint32, error) {
	c.calls.Add(1)
	threadcpu.Spin(c.cpu)
	return make([]uint32, len(r.Prompt)), nil
}

// Through ext_proc: once the large tokenizations have spent their CPU budget
// (--large-tokenize-cpu), a 64 KiB prompt is routed on load alone, without reaching the
// tokenizer, and the metrics port counts it under its own reason.
func TestLargePromptOverCPUBudgetRoutedOnLoad(t *testing.T) {
	if _, ok := threadcpu.Now(); !ok {
		t.Skip("no thread CPU clock on " + runtime.GOOS)
	}
	calls := new(atomic.Int32)
	// 1 ms at once and a ten-thousandth of a CPU: the first prompt's 3 ms leave at least
	// 2 ms of debt, 20 s to repay.
	a := start(t, Config{Endpoints: []string{"10.0.0.1:8000", "10.0.0.2:8000"}, Tokenizer: cpuTokenizer{cpu: 3 * time.Millisecond, calls: calls},
		LargeTokenizeCPU: 1e-4, LargeTokenizeBurst: time.Millisecond})
	conn := dialExtProc(t, a)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		dest, err := sendBody(ctx, conn, 64<<10)
		if err != nil || dest == "" {
			t.Fatalf("large prompt %d: routed to %q, %v", i, dest, err)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the tokenizer was called %d times; want 1 (the first prompt, then the budget is in debt)", n)
	}
	_, body := httpDo(t, "GET", "http://"+a.MetricsAddr()+"/metrics", "", "")
	for _, want := range []string{`loadaware_untokenized_requests_total{reason="text-tokenizer-over-budget"} 2`, "loadaware_large_tokenize_cpu_seconds_total 0.00"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}
