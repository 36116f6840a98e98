package drive

import (
	"context"
	"net/http"
	"time"

	"github.com/loadaware/loadaware-epp/bench/capture"
	"github.com/loadaware/loadaware-epp/bench/openai"
	"github.com/loadaware/loadaware-epp/bench/trace"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// Source is what a drive sends: a generator of each seed's requests, the workload's name and
// its offered rate (requests per second).
type Source struct {
	Seed func(seed uint64) ([]workload.Request, error)
	Name string
	Rate float64
}

// TraceSource replays the Mooncake trace name (a file or an embedded trace's name): the
// trace's clock divided by speedup, seed N its window [(N-1)*window, N*window) (window 0:
// every seed the whole trace), at most limit requests a seed (0: all), prompts capped to
// ctxTokens; text sends prompts as text.
func TraceSource(name string, speedup float64, window time.Duration, ctxTokens, limit int, text bool) (Source, error) {
	tr, err := trace.Load(name)
	if err != nil {
		return Source{}, err
	}
	span := tr.Records[len(tr.Records)-1].At - tr.Records[0].At
	gen := func(seed uint64) ([]workload.Request, error) {
		o := trace.Options{Speedup: speedup, MaxRequests: limit, Context: ctxTokens}
		if window > 0 && seed > 0 {
			o.Window = trace.Window{From: time.Duration(seed-1) * window, To: time.Duration(seed) * window}
		}
		sel, err := trace.Select(tr.Records, o)
		if err != nil {
			return nil, err
		}
		return workload.FromTrace(sel, text), nil
	}
	return Source{Seed: gen, Name: tr.Name, Rate: float64(len(tr.Records)) / max(span.Seconds(), 1) * speedup}, nil
}

// WorkloadSource generates the workload spec names (published, a shipped profile or a
// workload file), limit requests a seed when positive.
func WorkloadSource(spec string, limit int) (Source, error) {
	f, err := workload.Resolve(spec)
	if err != nil {
		return Source{}, err
	}
	if limit > 0 {
		f.Config.Requests = limit
	}
	pool, err := workload.NewPool(f.Config)
	if err != nil {
		return Source{}, err
	}
	gen := func(seed uint64) ([]workload.Request, error) { return workload.Generate(f.Config, pool, seed) }
	return Source{Seed: gen, Name: f.Name, Rate: f.Config.Rate}, nil
}

// OpenAISend sends each request as a streaming completion of model through c, its prompt
// as text or as token ids.
func OpenAISend(c *openai.Client, model string, text bool) Send {
	return func(ctx context.Context, r workload.Request) Outcome {
		req := openai.Request{Model: model, MaxTokens: r.MaxTokens, Stream: true}
		if text {
			req.Prompt = r.Text
		} else {
			req.Prompt = r.Tokens
		}
		resp, err := c.Do(ctx, req)
		o := Outcome{TTFT: resp.TTFT(), E2E: resp.E2E(), ITLs: resp.ITLs(), PromptTokens: len(r.Tokens), CompletionTokens: resp.CompletionTokens, Err: err}
		if o.CompletionTokens < 0 {
			o.CompletionTokens = len(resp.Tokens)
		}
		return o
	}
}

// Metrics returns RunCell's metrics for one cell and how to stop what it started: a
// Prometheus server's query_range at prom when prom is not "", else a scrape of the engines'
// /metrics every interval, started now.
func Metrics(ctx context.Context, c *http.Client, engines []string, prom string, every time.Duration) (func(start, end time.Time) (map[string][]capture.Series, error), func(), error) {
	if prom != "" {
		return func(start, end time.Time) (map[string][]capture.Series, error) {
			return PrometheusRange(ctx, c, prom, start.Add(-every), end.Add(every), every)
		}, func() {}, nil
	}
	s, err := NewScraper(engines, c)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { s.Run(sctx, every); close(done) }()
	stop := func() { cancel(); <-done }
	return func(start, end time.Time) (map[string][]capture.Series, error) {
		stop()
		s.ScrapeOnce(ctx, time.Now())
		for _, err := range s.Errors() {
			return nil, err // it names the engine's URL
		}
		return s.Series(), nil
	}, stop, nil
}
