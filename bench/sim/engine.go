package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// KeyFunc returns the LMCache chunk keys of a prompt, one per ChunkSize chunk,
// the trailing partial chunk included (lmcache.Hasher.ChunkKeys).
type KeyFunc func(tokens []uint32) []int64

// Request is one completion request inside the engine. The caller sets the
// exported inputs before Add; the engine fills in the results.
type Request struct {
	ID        string
	Tokens    []uint32 // prompt token ids
	MaxTokens int      // output tokens to generate (no early stop: temperature 0, ignore EOS)
	Adapter   string   // the LoRA adapter the request runs under; "" for the base model
	// PinRank is 1 + the data-parallel rank the request asks for (vLLM's
	// x-data-parallel-rank header); 0: none, the engine's balancer chooses (DP).
	PinRank int

	// Results.
	TokenTimes   []time.Duration // when each output token was produced
	Done         bool            // every output token produced
	Preemptions  int             // times the request lost its blocks and was recomputed
	CachedTokens int             // prompt tokens found in the GPU prefix cache at first admission
	LoadedTokens int             // prompt tokens loaded from the LMCache CPU tier at first admission
	AdmittedAt   time.Duration   // when the scheduler first admitted the request (the start of that step)

	uid        uint64
	admitted   bool
	computed   int // tokens whose KV is computed or loaded
	generated  int
	blocks     []int32
	registered int      // leading blocks offered to the prefix cache
	hashes     []uint64 // content hashes of the full blocks known so far
	keys       []int64  // LMCache chunk keys of the prompt
	keyLens    []int    // tokens of each chunk
	lmHit      int      // tokens the engine's LMCache lookup found at first admission
}

// skipSave reports whether LMCache saves nothing of r's prompt. LMCache's
// vLLM connector (0.3.x, ReqMeta.from_request_tracker) starts a request's
// saved-token count at its LMCache hit and skips the save while the prompt
// does not reach the next chunk boundary past it: a request that found its
// prefix in the CPU tier stores neither the prefix again nor its own partial
// last chunk. Only requests with no LMCache hit store their prompts.
func (r *Request) skipSave(chunk int) bool {
	if r.lmHit == 0 {
		return false
	}
	boundary := (r.lmHit + chunk) / chunk * chunk // cdiv(hit+1, chunk) * chunk
	return len(r.Tokens) < boundary
}

func (r *Request) numTokens() int { return len(r.Tokens) + r.generated }

// tokenAt returns the token at position i: the prompt, then stand-ins for
// generated tokens that are unique to the request (outputs are never shared).
func (r *Request) tokenAt(i int) uint64 {
	if i < len(r.Tokens) {
		return uint64(r.Tokens[i])
	}
	return 1<<32 | mix(r.uid, uint64(i))
}

// blockHash returns the content hash of full block i, chained on block i-1;
// block 0 is chained on the adapter's name, as vLLM folds the LoRA name into
// every block's hash (extra keys), so blocks are shared only within an adapter.
func (r *Request) blockHash(i, blockSize int) uint64 {
	for len(r.hashes) <= i {
		j := len(r.hashes)
		h := uint64(0x6a09e667f3bcc908)
		if j > 0 {
			h = r.hashes[j-1]
		} else {
			for k := 0; k < len(r.Adapter); k++ {
				h = mix(h, uint64(r.Adapter[k]))
			}
		}
		for t := j * blockSize; t < (j+1)*blockSize; t++ {
			h = mix(h, r.tokenAt(t))
		}
		r.hashes = append(r.hashes, h)
	}
	return r.hashes[i]
}

// mix is a 64-bit hash step (splitmix64 finalizer over a combination).
func mix(h, v uint64) uint64 {
	x := h ^ (v + 0x9e3779b97f4a7c15 + h<<6 + h>>2)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// KVEvent is one LMCache CPU-tier change: a chunk stored (Admit) or evicted.
type KVEvent struct {
	Key   int64
	Admit bool
}

// Outcome is what one engine step produced, at time At.
type Outcome struct {
	At       time.Duration
	Tokens   []*Request // requests that produced one output token in this step
	Finished []*Request // requests whose last token was produced in this step
	KV       []KVEvent  // CPU-tier stores and evictions, in order
	Rank     int        // the data-parallel rank whose step it was (DP); 0 for an Engine
}

// Metrics is what vLLM exports on /metrics, as totals and gauges.
type Metrics struct {
	Running       int     // vllm:num_requests_running
	Waiting       int     // vllm:num_requests_waiting
	KVUsage       float64 // vllm:kv_cache_usage_perc (0..1)
	PrefixQueries int64   // vllm:prefix_cache_queries_total (tokens)
	PrefixHits    int64   // vllm:prefix_cache_hits_total (tokens)
	Preemptions   int64   // vllm:num_preemptions_total
	Steps         int64
	CPUTokens     int64 // tokens held by the LMCache CPU tier

	// vllm:lora_requests_info's labels: max_lora and the adapters of the running and
	// waiting requests, as the last step left them (sorted); AdapterLoads counts
	// adapters activated into a GPU slot.
	MaxLoRAs        int
	RunningAdapters []string
	WaitingAdapters []string
	AdapterLoads    int64

	// Ranks are the running and waiting gauges of each data-parallel rank behind the
	// port (vLLM's series with the `engine` label r), Ranks[r] rank r's; nil for one rank.
	Ranks []RankGauges
}

// RankGauges are one data-parallel rank's vllm:num_requests_running and _waiting.
type RankGauges struct{ Running, Waiting int }

// ErrTooLong is returned by Add for a request that can never fit the KV pool.
var ErrTooLong = errors.New("sim: request longer than the KV pool")

// Engine is one simulated vLLM engine. It is not safe for concurrent use.
type Engine struct {
	cfg     Config
	keys    KeyFunc
	pool    *blockPool
	cpu     *cpuTier
	waiting []*Request
	running []*Request
	nextUID uint64

	busy    bool
	stepEnd time.Duration
	apiFree time.Duration // when the API server has streamed every output so far
	// The gauges as vLLM last logged them: after each step, running after
	// finished requests leave and waiting as the step's scheduling left it
	// (requests that arrive during a step reach the scheduler's queue only
	// before the next step).
	gaugeRunning, gaugeWaiting, stepWaiting int
	batch                                   []scheduled
	stats                                   Metrics
	out                                     Outcome
	slots                                   []string // adapters in the GPU's LoRA slots, least recently used first
	gaugeAdapters                           [2][]string
}

type scheduled struct {
	r      *Request
	start  int // computed tokens before this step
	tokens int // tokens computed in this step
}

// New returns an idle engine with empty caches. keys computes LMCache chunk
// keys; it must not be nil.
func New(cfg Config, keys KeyFunc) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if keys == nil {
		return nil, errors.New("sim: no chunk-key function: pass lmcache.Hasher.ChunkKeys")
	}
	return &Engine{
		cfg:  cfg,
		keys: keys,
		pool: newBlockPool(cfg.Blocks()),
		cpu:  newCPUTier(cfg.CPUTierTokens()),
	}, nil
}

// Config returns the engine's constants.
func (e *Engine) Config() Config { return e.cfg }

// Add queues a request (it arrived at the engine now). A request whose prompt
// and output cannot fit the KV pool is refused with ErrTooLong.
func (e *Engine) Add(r *Request) error {
	if r.MaxTokens < 1 || len(r.Tokens) == 0 {
		return fmt.Errorf("sim: request %q has %d prompt tokens and max_tokens %d: need at least one of each", r.ID, len(r.Tokens), r.MaxTokens)
	}
	if r.Adapter != "" && e.cfg.MaxLoRAs == 0 {
		return fmt.Errorf("sim: request %q is for adapter %q but the engine serves none (MaxLoRAs 0): set MaxLoRAs, as vLLM needs --enable-lora", r.ID, r.Adapter)
	}
	if len(r.Tokens)+r.MaxTokens > e.cfg.Blocks()*e.cfg.BlockSize {
		return fmt.Errorf("%w: %d prompt + %d output tokens, pool %d tokens", ErrTooLong, len(r.Tokens), r.MaxTokens, e.cfg.Blocks()*e.cfg.BlockSize)
	}
	e.nextUID++
	r.uid = e.nextUID
	r.keys = e.keys(r.Tokens)
	r.keyLens = make([]int, len(r.keys))
	for i := range r.keys {
		r.keyLens[i] = min(e.cfg.ChunkSize, len(r.Tokens)-i*e.cfg.ChunkSize)
	}
	e.waiting = append(e.waiting, r)
	return nil
}

// Busy reports whether a step is in progress, and when it ends.
func (e *Engine) Busy() (time.Duration, bool) { return e.stepEnd, e.busy }

// Metrics returns the current gauges and totals.
func (e *Engine) Metrics() Metrics {
	m := e.stats
	m.Running = e.gaugeRunning
	m.Waiting = e.gaugeWaiting
	m.KVUsage = float64(e.pool.used()) / float64(len(e.pool.blocks))
	m.CPUTokens = e.cpu.used
	m.MaxLoRAs = e.cfg.MaxLoRAs
	m.RunningAdapters, m.WaitingAdapters = e.gaugeAdapters[0], e.gaugeAdapters[1]
	return m
}

// Start begins a step at now if the engine is idle and has work, and returns
// the time the step ends. The caller must call Finish at that time.
func (e *Engine) Start(now time.Duration) (time.Duration, bool) {
	if e.busy || (len(e.running) == 0 && len(e.waiting) == 0) {
		return 0, false
	}
	cost := e.schedule(now)
	if len(e.batch) == 0 {
		return 0, false
	}
	e.busy = true
	e.stepEnd = now + cost
	e.stepWaiting = len(e.waiting)
	e.stats.Steps++
	return e.stepEnd, true
}

// Finish completes the step in progress (at the time Start returned) and
// reports what it produced. The Outcome is valid until the next Finish.
func (e *Engine) Finish() Outcome {
	e.out = Outcome{At: e.stepEnd, Tokens: e.out.Tokens[:0], Finished: e.out.Finished[:0], KV: e.out.KV[:0]}
	if !e.busy {
		return e.out
	}
	e.busy = false
	bs := e.cfg.BlockSize
	// The API server streams a step's outputs after the step, one token at a
	// time, while the engine runs the next steps: a token reaches the client
	// when the API server has handled it.
	delivered := e.stepEnd
	if e.cfg.OutputCost > 0 {
		n := 0
		for _, s := range e.batch {
			if s.r.computed+s.tokens == s.r.numTokens() {
				n++
			}
		}
		e.apiFree = max(e.apiFree, e.stepEnd) + time.Duration(n)*e.cfg.OutputCost
		delivered = e.apiFree
	}
	for _, s := range e.batch {
		r := s.r
		r.computed += s.tokens
		for ; r.registered < r.computed/bs; r.registered++ {
			e.pool.register(r.blocks[r.registered], r.blockHash(r.registered, bs))
		}
		if s.start < len(r.Tokens) && r.computed >= len(r.Tokens) {
			e.storePrompt(r)
		}
		if r.computed == r.numTokens() {
			r.generated++
			r.TokenTimes = append(r.TokenTimes, delivered)
			e.out.Tokens = append(e.out.Tokens, r)
			if r.generated == r.MaxTokens {
				r.Done = true
				e.out.Finished = append(e.out.Finished, r)
			}
		}
	}
	if len(e.out.Finished) > 0 {
		kept := e.running[:0]
		for _, r := range e.running {
			if r.Done {
				e.pool.release(r.blocks)
				r.blocks = nil
				continue
			}
			kept = append(kept, r)
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
	e.batch = e.batch[:0]
	e.gaugeRunning, e.gaugeWaiting = len(e.running), e.stepWaiting
	if e.cfg.MaxLoRAs > 0 {
		e.gaugeAdapters = [2][]string{adapters(e.running), adapters(e.waiting)}
	}
	return e.out
}

// adapters returns the distinct adapters of rs, sorted (nil when none).
func adapters(rs []*Request) []string {
	var out []string
	for _, r := range rs {
		if r.Adapter != "" {
			out = append(out, r.Adapter)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
