// Package gie runs the Gateway API Inference Extension's endpoint picker (GIE,
// sigs.k8s.io/gateway-api-inference-extension v1.5.0, imported, not copied) as a bench peer:
// its config loader, its default scheduling profile (queue-depth x2, kv-cache-utilization x2,
// prefix-cache x3, max-score picker), its approximate prefix index, its OpenAI request parser
// and its Director, the request pipeline GIE's ext_proc server calls per request.
//
// The adapter replaces only what a bench has instead of a Kubernetes cluster: the datastore
// (the fleet is a fixed list of addresses), the metrics scraper (the caller passes each
// endpoint's metrics as a scraper last saw them), the picker's tie-break generator and the
// Director's wall-clock timeout on its prepare-data step (see Config). It is bench-only:
// product packages must not import it (see docs/bench/peers.md).
package gie

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	framework "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"
)

// Metrics is one endpoint's state as GIE's metrics extractor reads it from a vLLM engine's
// /metrics, at the last scrape. The zero value is what GIE holds for an endpoint it has not
// scraped yet.
type Metrics struct {
	// Waiting is vllm:num_requests_waiting (the queue-depth scorer's input).
	Waiting int
	// Running is vllm:num_requests_running.
	Running int
	// KVCacheUsage is vllm:kv_cache_usage_perc, a fraction in [0, 1] despite the name (the
	// kv-cache-utilization scorer scores 1 - KVCacheUsage).
	KVCacheUsage float64
	// RunningAdapters, WaitingAdapters and MaxLoRA are the running_lora_adapters,
	// waiting_lora_adapters and max_lora labels of vllm:lora_requests_info.
	RunningAdapters []string
	WaitingAdapters []string
	MaxLoRA         int
	// CacheBlockSize and CacheNumBlocks are the block_size and num_gpu_blocks labels of
	// vllm:cache_config_info; 0 means not exported. With GIE's default autoTune the prefix
	// index hashes the prompt in CacheBlockSize-token blocks (else 16) and keeps
	// CacheNumBlocks blocks per endpoint (else 31250).
	CacheBlockSize int
	CacheNumBlocks int
	// Scraped is when the scrape happened (GIE's saturation detector ignores metrics older
	// than its staleness threshold); zero means at the Pick.
	Scraped time.Time
}

// Request is one inference request as GIE's ext_proc server hands it to the Director.
type Request struct {
	// ID is the x-request-id GIE keys per-request state by; unique among requests in flight.
	ID string
	// Path is the request's :path; empty means GIE's default, /v1/completions. It decides
	// how GIE's OpenAI parser reads Body (completions prompt, chat messages, ...).
	Path string
	// Body is the JSON body as the client sent it ("model" is required).
	Body []byte
	// Headers are further request headers (lower-case names, as Envoy passes them).
	Headers map[string]string
	// Subset, if not nil, is Envoy's endpoint subset hint (addresses host:port). GIE matches
	// it on the host part only, as pods have one address each.
	Subset []string
}

// CompletionRequest returns a /v1/completions request for model with prompt.
func CompletionRequest(id, model, prompt string) Request {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt})
	return Request{ID: id, Path: "/v1/completions", Body: body}
}

// Scored is one candidate of a scheduling cycle.
type Scored struct {
	// Endpoint is the candidate's address.
	Endpoint string
	// Score is the profile's weighted sum of its scorers' scores.
	Score float64
	// PrefixMatchBlocks of PrefixTotalBlocks prompt blocks were found for this endpoint
	// in GIE's approximate prefix index (both 0 if the profile has no prefix scorer).
	PrefixMatchBlocks int
	PrefixTotalBlocks int
}

// Decision is GIE's answer for one request.
type Decision struct {
	// Endpoint is the address GIE routes the request to.
	Endpoint string
	// Ranking is every candidate the profile scored, in the picker's final order: highest
	// score first, equal scores in the tie-break's order. Ranking[0] is Endpoint.
	Ranking []Scored
}

// Config selects what the adapter runs.
type Config struct {
	// PickerConfig is a GIE EndpointPickerConfig (YAML or JSON, as GIE's --config-text
	// takes it) with exactly one scheduling profile, whose picker, if named, is
	// max-score-picker choosing one endpoint. Empty runs GIE's built-in default
	// (pkg/epp/config/loader/defaults.go).
	PickerConfig string
	// Seed seeds the tie-break among equal top scores. GIE's max-score-picker shuffles the
	// candidates with a generator seeded from the wall clock, so two runs differ; the
	// adapter applies the same rule with this seed instead, so paired-seed runs repeat.
	Seed uint64
	// TimeSeededTies runs GIE's max-score-picker itself, wall-clock tie-break included.
	TimeSeededTies bool
	// TimedPrepareData runs the prepare-data plugins as GIE's Director runs them, on a
	// goroutine it stops waiting for after 400 ms of wall-clock time, so a loaded host can
	// change the decisions. By default the adapter runs them synchronously, with nothing
	// timed (see syncPrepareData).
	TimedPrepareData bool
}

// ProfilePlugin is one plugin of the scheduling profile in effect.
type ProfilePlugin struct {
	Name   string
	Type   string
	Weight float64 // 0 for a plugin that is not a scorer
}

// Pipeline names the plugins GIE's Director runs at each extension point, as loaded.
// PrepareData is in the order the plugins run; they run before the Admission plugins, from
// the adapter's untimed step unless Config.TimedPrepareData (Admission does not list that
// step).
type Pipeline struct {
	Profile            []ProfilePlugin
	PrepareData        []string
	Admission          []string
	PreRequest         []string
	ResponseReceived   []string
	ResponseStreaming  []string
	SaturationDetector string
}

// Picker is GIE's endpoint picker over a fixed fleet. Pick and Done may be called from
// several goroutines; scheduling cycles run one at a time.
type Picker struct {
	ctx      context.Context
	cancel   context.CancelFunc
	pool     *pool
	director *requestcontrol.Director
	recorder *recordingPicker
	prefixWG *sync.WaitGroup // the approximate prefix producer's pending index updates
	pipeline Pipeline

	mu       sync.Mutex
	inflight map[string]*handlers.RequestContext
}

// New loads GIE's configuration (cfg.PickerConfig or GIE's default) over the fleet's
// endpoints (distinct host:port addresses) and wires GIE's Director as GIE's runner does,
// with the legacy admission controller (flow control is off by default in v1.5.0), except
// that the prepare-data plugins run untimed (Config.TimedPrepareData). Call Close when
// done: GIE's plugins run background goroutines.
func New(endpoints []string, cfg Config) (*Picker, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("gie: no endpoints: pass the fleet's host:port addresses")
	}
	p := &pool{byAddr: make(map[string]*fwkdl.ModelServer, len(endpoints))}
	for _, addr := range endpoints {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			return nil, fmt.Errorf("gie: endpoint %q is not host:port", addr)
		}
		if _, dup := p.byAddr[addr]; dup {
			return nil, fmt.Errorf("gie: endpoint %q listed twice", addr)
		}
		ms := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{
			NamespacedName: k8stypes.NamespacedName{Namespace: poolNamespace, Name: addr},
			PodName:        addr,
			Address:        host,
			Port:           port,
			MetricsHost:    addr,
		}, fwkdl.NewMetrics())
		p.byAddr[addr] = ms
		p.order = append(p.order, addr)
	}
	registerPlugins()

	logger := logr.Discard()
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
	picker, err := build(ctx, logger, p, cfg)
	if err != nil {
		cancel()
		return nil, err
	}
	picker.ctx, picker.cancel = ctx, cancel
	return picker, nil
}

func build(ctx context.Context, logger logr.Logger, p *pool, cfg Config) (*Picker, error) {
	raw, _, err := loader.LoadRawConfig([]byte(cfg.PickerConfig), logger)
	if err != nil {
		return nil, fmt.Errorf("gie: picker config: %w", err)
	}
	if err := installRecorder(raw, cfg); err != nil {
		return nil, err
	}
	handle := fwkplugin.NewEppHandle(ctx, p.names)
	loaded, err := loader.InstantiateAndConfigure(raw, handle, logger)
	if err != nil {
		return nil, fmt.Errorf("gie: loading the picker config: %w", err)
	}
	recorder, ok := handle.Plugin(recordingPickerType).(*recordingPicker)
	if !ok {
		return nil, errors.New("gie: the recording picker was not instantiated")
	}
	plugins := handle.GetAllPlugins()
	rc := requestcontrol.NewConfig()
	rc.AddPlugins(plugins...)
	order, err := datalayer.ValidateAndOrderDataDependencies(plugins)
	if err != nil {
		return nil, fmt.Errorf("gie: plugin data dependencies: %w", err)
	}
	if cfg.TimedPrepareData {
		rc.OrderPrepareDataPlugins(order)
	} else {
		// The Director's timed step gets no plugins (it then starts no goroutine and no
		// timer); they run first in the admission step instead, before the configured
		// admission plugins, as they would have run before them.
		rc.OrderPrepareDataPlugins(nil)
		admit := []fwkrc.AdmissionPlugin{&syncPrepareData{plugins: orderedPrepareData(plugins, order)}}
		for _, pl := range plugins {
			if a, ok := pl.(fwkrc.AdmissionPlugin); ok {
				admit = append(admit, a)
			}
		}
		rc.WithAdmissionPlugins(admit...)
	}

	candidates := requestcontrol.NewDatastoreEndpointCandidates(p)
	admission := requestcontrol.NewLegacyAdmissionController(loaded.SaturationDetector, candidates)
	director := requestcontrol.NewDirectorWithConfig(p, scheduling.NewSchedulerWithConfig(loaded.SchedulerConfig),
		admission, handlers.NewParser(loaded.ParserConfig), candidates, rc)

	out := &Picker{
		pool:     p,
		director: director,
		recorder: recorder,
		inflight: map[string]*handlers.RequestContext{},
		pipeline: describe(raw, handle, order),
	}
	for _, pl := range plugins {
		if pl.TypedName().Type != approximateprefix.ApproxPrefixCachePluginType {
			continue
		}
		if out.prefixWG, err = pendingUpdates(pl); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// installRecorder puts the recording picker in place of the profile's max-score-picker.
func installRecorder(raw *configapi.EndpointPickerConfig, cfg Config) error {
	if len(raw.SchedulingProfiles) != 1 {
		return fmt.Errorf("gie: picker config has %d scheduling profiles; the adapter runs exactly one", len(raw.SchedulingProfiles))
	}
	types := map[string]configapi.PluginSpec{}
	for _, spec := range raw.Plugins {
		types[spec.Name] = spec
	}
	prof := &raw.SchedulingProfiles[0]
	kept := prof.Plugins[:0]
	for _, ref := range prof.Plugins {
		spec := types[ref.PluginRef]
		switch spec.Type {
		case picker.MaxScorePickerType:
			var params struct {
				MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
			}
			if len(spec.Parameters) > 0 {
				if err := json.Unmarshal(spec.Parameters, &params); err != nil {
					return fmt.Errorf("gie: %s parameters %s: %w", spec.Name, spec.Parameters, err)
				}
			}
			if params.MaxNumOfEndpoints > 1 {
				return fmt.Errorf("gie: %s picks %d endpoints; the adapter supports 1", spec.Name, params.MaxNumOfEndpoints)
			}
			continue
		case picker.RandomPickerType, picker.WeightedRandomPickerType:
			return fmt.Errorf("gie: profile %q uses %s; the adapter supports %s only", prof.Name, spec.Type, picker.MaxScorePickerType)
		}
		kept = append(kept, ref)
	}
	params, err := json.Marshal(pickerParams{Seed: cfg.Seed, TimeSeededTies: cfg.TimeSeededTies})
	if err != nil {
		return fmt.Errorf("gie: picker parameters: %w", err)
	}
	raw.Plugins = append(raw.Plugins, configapi.PluginSpec{Name: recordingPickerType, Type: recordingPickerType, Parameters: params})
	prof.Plugins = append(kept, configapi.SchedulingPlugin{PluginRef: recordingPickerType})
	return nil
}

// pendingUpdates returns the WaitGroup the approximate prefix producer's PreRequest adds
// its asynchronous index update to. GIE exports no way to await it (its own tests read the
// field), so the adapter reads the field too, by reflection on the pinned version; a
// version without it fails here, not silently.
func pendingUpdates(pl fwkplugin.Plugin) (*sync.WaitGroup, error) {
	v := reflect.ValueOf(pl)
	if v.Kind() == reflect.Pointer && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("wg"); f.IsValid() && f.Type() == reflect.TypeFor[sync.WaitGroup]() {
			return (*sync.WaitGroup)(f.Addr().UnsafePointer()), nil
		}
	}
	return nil, fmt.Errorf("gie: %T has no wg sync.WaitGroup field: GIE's prefix producer changed; update the adapter", pl)
}

func describe(raw *configapi.EndpointPickerConfig, handle fwkplugin.Handle, dataOrder []string) Pipeline {
	var pl Pipeline
	types := map[string]string{}
	for _, spec := range raw.Plugins {
		types[spec.Name] = spec.Type
	}
	for _, ref := range raw.SchedulingProfiles[0].Plugins {
		pp := ProfilePlugin{Name: ref.PluginRef, Type: types[ref.PluginRef]}
		if _, ok := handle.Plugin(ref.PluginRef).(framework.Scorer); ok && ref.Weight != nil {
			pp.Weight = *ref.Weight
		}
		pl.Profile = append(pl.Profile, pp)
	}
	all := handle.GetAllPluginsWithNames()
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if _, ok := all[name].(fwkrc.AdmissionPlugin); ok {
			pl.Admission = append(pl.Admission, name)
		}
		if _, ok := all[name].(fwkrc.PreRequest); ok {
			pl.PreRequest = append(pl.PreRequest, name)
		}
		if _, ok := all[name].(fwkrc.ResponseHeader); ok {
			pl.ResponseReceived = append(pl.ResponseReceived, name)
		}
		if _, ok := all[name].(fwkrc.ResponseBody); ok {
			pl.ResponseStreaming = append(pl.ResponseStreaming, name)
		}
	}
	for _, typed := range dataOrder {
		for name, plug := range all {
			if _, ok := plug.(fwkrc.PrepareDataPlugin); ok && plug.TypedName().String() == typed {
				pl.PrepareData = append(pl.PrepareData, name)
			}
		}
	}
	if raw.SaturationDetector != nil {
		pl.SaturationDetector = raw.SaturationDetector.PluginRef
	}
	return pl
}

// Pipeline reports the plugins in effect.
func (g *Picker) Pipeline() Pipeline { return g.pipeline }

// Pick runs GIE's request pipeline for req with the fleet's metrics as last scraped
// (endpoints missing from metrics keep what they had, zero before the first snapshot):
// parse, admission, prepare-data (the prefix index lookup), the scheduling profile, and
// the PreRequest hooks (the prefix index records the prompt for the chosen endpoint; Pick
// returns after that update is applied). Call Done when the response has ended.
func (g *Picker) Pick(req Request, metrics map[string]Metrics) (Decision, error) {
	if req.ID == "" {
		return Decision{}, errors.New("gie: request without an ID: set Request.ID (GIE keys per-request state by x-request-id)")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, dup := g.inflight[req.ID]; dup {
		return Decision{}, fmt.Errorf("gie: request %q is already in flight: IDs must be unique until Done", req.ID)
	}
	if err := g.pool.observe(metrics); err != nil {
		return Decision{}, err
	}
	headers := make(map[string]string, len(req.Headers)+2)
	maps.Copy(headers, req.Headers)
	headers[reqcommon.RequestIdHeaderKey] = req.ID
	if req.Path != "" {
		headers[":path"] = req.Path
	}
	md := map[string]any{}
	if req.Subset != nil {
		subset := make([]any, len(req.Subset))
		for i, s := range req.Subset {
			subset[i] = s
		}
		md[metadata.SubsetFilterNamespace] = map[string]any{metadata.SubsetFilterKey: subset}
	}
	rc := &handlers.RequestContext{
		Request:                  &handlers.Request{Headers: headers, RawBody: req.Body, Metadata: md},
		Response:                 &handlers.Response{Headers: map[string]string{}},
		RequestReceivedTimestamp: time.Now(),
		RequestSize:              len(req.Body),
	}
	rc, err := g.director.HandleRequest(g.ctx, rc)
	if g.prefixWG != nil {
		g.prefixWG.Wait()
	}
	ranking := g.recorder.takeLast()
	if err != nil {
		return Decision{}, fmt.Errorf("gie: request %q: %w", req.ID, err)
	}
	chosen := ""
	if rc.TargetPod != nil {
		chosen = rc.TargetPod.NamespacedName.Name
	}
	if _, ok := g.pool.byAddr[chosen]; !ok {
		return Decision{}, fmt.Errorf("gie: request %q: GIE chose %q, not a fleet endpoint", req.ID, rc.TargetEndpoint)
	}
	g.inflight[req.ID] = rc
	return Decision{Endpoint: chosen, Ranking: ranking}, nil
}

// Done tells GIE's pipeline that request id's response has ended: the Director's response
// hooks run (response received, then the end-of-stream body hook), as GIE's ext_proc server
// runs them when the response's last chunk passes.
func (g *Picker) Done(id string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	rc, ok := g.inflight[id]
	if !ok {
		return fmt.Errorf("gie: Done(%q): no such request in flight", id)
	}
	delete(g.inflight, id)
	rc = g.director.HandleResponseHeader(g.ctx, rc)
	g.director.HandleResponseBody(g.ctx, rc, true)
	return nil
}

// InFlight returns how many picked requests await Done.
func (g *Picker) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.inflight)
}

// Close stops GIE's background goroutines (prefix index reporting and pod clean-up,
// plugin state expiry). The Picker must not be used afterwards.
func (g *Picker) Close() {
	g.cancel()
}
