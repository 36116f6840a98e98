package picker

import (
	"bytes"
	"context"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/internal/threadcpu"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The budget's arithmetic: full at the start, a charge into debt refuses until the rate has
// repaid it, the refill stops at the burst, and no budget never refuses.
func TestLargeBudget(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		at     int           // ms after t0
		charge time.Duration // charged at `at` after the check; 0: none
		debt   bool          // inDebt at `at`, before the charge
	}
	tests := []struct {
		name  string
		share float64
		burst time.Duration
		steps []step
	}{
		{"full at the start: a burst's worth passes", 0.5, 100 * time.Millisecond, []step{
			{at: 0, charge: 60 * time.Millisecond}, {at: 0, charge: 40 * time.Millisecond}, {at: 0}}},
		{"a charge past the burst is debt, refused until repaid", 0.5, 100 * time.Millisecond, []step{
			{at: 0, charge: 150 * time.Millisecond},
			{at: 0, debt: true},
			{at: 99, debt: true}, // 50 ms of debt at 0.5 CPU: 100 ms
			{at: 100},            // exactly repaid: not in debt
		}},
		{"debt accumulates across charges", 0.25, 10 * time.Millisecond, []step{
			{at: 0, charge: 30 * time.Millisecond},  // 20 ms of debt
			{at: 40, charge: 0, debt: true},         // 10 ms repaid, 10 ms owed
			{at: 79, debt: true},                    // 0.25 ms owed
			{at: 80, charge: 50 * time.Millisecond}, // repaid, then 50 ms of debt: 200 ms to repay
			{at: 279, debt: true},
			{at: 281},
		}},
		{"the refill stops at the burst", 1, 20 * time.Millisecond, []step{
			{at: 0, charge: 20 * time.Millisecond},
			{at: 10_000, charge: 20 * time.Millisecond}, // ten idle seconds earned only the burst
			{at: 10_000, charge: 1 * time.Millisecond},  // the bucket was empty, not in debt: admitted
			{at: 10_000, debt: true},
		}},
		{"no budget never refuses", 0, 0, []step{
			{at: 0, charge: time.Hour}, {at: 0}, {at: 1}}},
		{"a negative share is no budget", -1, time.Second, []step{
			{at: 0, charge: time.Hour}, {at: 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newLargeBudget(tt.share, tt.burst, t0)
			if (g == nil) != (tt.share <= 0) {
				t.Fatalf("newLargeBudget(%g) = %v: want a budget exactly for a positive share", tt.share, g)
			}
			for i, s := range tt.steps {
				if got := g.inDebt(at(s.at)); got != s.debt {
					t.Fatalf("step %d at %d ms: inDebt = %v, want %v", i, s.at, got, s.debt)
				}
				g.charge(s.charge, at(s.at))
			}
		})
	}
}

// spinTokenizer is fakeTokenizer after busying its thread for cpu of thread CPU time; it
// counts its calls.
type spinTokenizer struct {
	cpu   time.Duration
	calls *atomic.Int32
}

func (s spinTokenizer) Tokenize(ctx context.Context, r Request, eps []string) ([]uint32, error) {
	s.calls.Add(1)
	threadcpu.Spin(s.cpu)
	return fakeTokenizer{}.Tokenize(ctx, r, eps)
}

// A large prompt's tokenization is charged its thread's CPU time; once the budget is in
// debt the next large prompts are routed on load alone (noted, counted over-budget, the
// tokenizer not called; one warning a minute naming the flag), a small prompt is still
// tokenized, and once the rate has repaid the debt a large prompt is tokenized again.
func TestLargeTokenizationsOverBudgetRouteOnLoad(t *testing.T) {
	if _, ok := threadcpu.Now(); !ok {
		t.Skip("no thread CPU clock on " + runtime.GOOS)
	}
	now := time.Unix(0, 0)
	calls := new(atomic.Int32)
	var logged bytes.Buffer
	p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000", "10.0.0.2:8000"), Now: func() time.Time { return now },
		Logger:           slog.New(slog.NewTextHandler(&logged, nil)),
		Tokenizer:        spinTokenizer{cpu: 3 * time.Millisecond, calls: calls},
		LargeTokenizeCPU: 0.01, LargeTokenizeBurst: 2 * time.Millisecond})
	large := strings.Repeat("a ", LargePromptBytes/2)
	pick := func(prompt string) Decision {
		t.Helper()
		d, err := p.Pick(context.Background(), Request{Prompt: prompt})
		if err != nil {
			t.Fatal(err)
		}
		d.Booking.Release()
		return d
	}
	if d := pick(large); d.PromptTokens == 0 {
		t.Fatalf("the first large prompt, budget full: not tokenized (%q)", d.Explain())
	}
	charged := testutil.ToFloat64(p.metrics.largeCPU)
	if charged < 0.003 {
		t.Fatalf("loadaware_large_tokenize_cpu_seconds_total = %g after a 3 ms tokenization", charged)
	}
	d := pick(large) // at least 1 ms of debt at 1% of a CPU: 0.1 s to repay; the clock stands
	if d.PromptTokens != 0 || !strings.Contains(d.Explain(), "have used their tokenizing CPU budget (--large-tokenize-cpu 0.01 of one CPU): routed on load alone") {
		t.Fatalf("a large prompt in debt: %d tokens, %q; want it routed on load alone, saying why", d.PromptTokens, d.Explain())
	}
	if len(d.Endpoints) == 0 {
		t.Fatal("a large prompt in debt was not routed")
	}
	if d := pick(large); d.PromptTokens != 0 {
		t.Fatal("a second large prompt in debt was tokenized")
	}
	if v := testutil.ToFloat64(p.metrics.untokenized.WithLabelValues("text-tokenizer-over-budget")); v != 2 {
		t.Fatalf("untokenized text-tokenizer-over-budget = %v, want 2", v)
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != 1 || !strings.Contains(logged.String(), "raise --large-tokenize-cpu") {
		t.Fatalf("the refusals logged %d warnings, want 1 a minute naming the flag:\n%s", n, logged.String())
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the tokenizer was called %d times; the prompt over budget should not reach it", n)
	}
	if d := pick("a b c"); d.PromptTokens != 3 {
		t.Fatalf("a small prompt while in debt: %d tokens, want 3 (small prompts are not budgeted)", d.PromptTokens)
	}
	if got := testutil.ToFloat64(p.metrics.largeCPU); got != charged {
		t.Fatalf("a small prompt was charged: %g -> %g CPU seconds", charged, got)
	}
	now = now.Add(time.Duration((charged - 0.002) / 0.01 * float64(time.Second))).Add(time.Millisecond)
	if d := pick(large); d.PromptTokens == 0 {
		t.Fatalf("a large prompt once the debt is repaid: not tokenized (%q)", d.Explain())
	}
	if v := testutil.ToFloat64(p.metrics.untokenized.WithLabelValues("text-tokenizer-over-budget")); v != 2 {
		t.Fatalf("untokenized text-tokenizer-over-budget = %v, want still 2", v)
	}
}

// With no budget (negative), large tokenizations are never refused for their CPU.
func TestLargeTokenizeCPUOff(t *testing.T) {
	calls := new(atomic.Int32)
	p := newPicker(t, Options{Fleet: newFleet("10.0.0.1:8000"), Tokenizer: spinTokenizer{cpu: time.Millisecond, calls: calls},
		LargeTokenizeCPU: -1, LargeTokenizeBurst: time.Microsecond})
	large := strings.Repeat("a ", LargePromptBytes/2)
	for i := range 3 {
		d, err := p.Pick(context.Background(), Request{Prompt: large})
		if err != nil {
			t.Fatal(err)
		}
		d.Booking.Release()
		if d.PromptTokens == 0 {
			t.Fatalf("large prompt %d with no budget: not tokenized (%q)", i, d.Explain())
		}
	}
	if p.largeCPU != nil || testutil.ToFloat64(p.metrics.largeCPU) != 0 {
		t.Fatal("a negative LargeTokenizeCPU should keep no budget and charge nothing")
	}
}
