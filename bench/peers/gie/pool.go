package gie

import (
	"errors"
	"fmt"
	"strings"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
)

// poolNamespace is the namespace the fleet's endpoints are given in GIE's terms.
const poolNamespace = "bench"

// pool stands in for GIE's datastore: the fleet is fixed, endpoint metrics are set by
// observe (GIE's data layer refreshes them by scraping), and there are no
// InferenceObjectives or model rewrites, so every request gets GIE's default priority 0
// and keeps its model.
type pool struct {
	order  []string // addresses as given to New
	byAddr map[string]*fwkdl.ModelServer
}

// observe installs the scraped metrics, all or (on an error) none; an address outside the
// fleet, a KV usage outside [0, 1] or a negative count is an error.
func (p *pool) observe(metrics map[string]Metrics) error {
	for addr, m := range metrics {
		if _, ok := p.byAddr[addr]; !ok {
			return fmt.Errorf("gie: metrics for %q, which is not a fleet endpoint (fleet: %s)", addr, strings.Join(p.order, ", "))
		}
		if m.KVCacheUsage < 0 || m.KVCacheUsage > 1 {
			return fmt.Errorf("gie: %s: KV-cache usage %v outside [0, 1] (vllm:kv_cache_usage_perc is a fraction)", addr, m.KVCacheUsage)
		}
		if m.Waiting < 0 || m.Running < 0 {
			return fmt.Errorf("gie: %s: negative request count (waiting %d, running %d)", addr, m.Waiting, m.Running)
		}
	}
	for addr, m := range metrics {
		p.byAddr[addr].UpdateMetrics(m.gie())
	}
	return nil
}

// gie converts to GIE's metrics record, as its extractor fills it from vLLM's metrics.
func (m Metrics) gie() *fwkdl.Metrics {
	out := fwkdl.NewMetrics()
	out.WaitingQueueSize = m.Waiting
	out.RunningRequestsSize = m.Running
	out.KVCacheUsagePercent = m.KVCacheUsage
	out.MaxActiveModels = m.MaxLoRA
	for _, a := range m.RunningAdapters {
		out.ActiveModels[a] = 0
	}
	for _, a := range m.WaitingAdapters {
		out.WaitingModels[a] = 0
	}
	out.CacheBlockSize = m.CacheBlockSize
	out.CacheNumBlocks = m.CacheNumBlocks
	out.UpdateTime = m.Scraped
	if out.UpdateTime.IsZero() {
		out.UpdateTime = time.Now()
	}
	return out
}

// names lists the fleet for GIE's plugin handle (the prefix index drops endpoints not listed).
func (p *pool) names() []k8stypes.NamespacedName {
	out := make([]k8stypes.NamespacedName, len(p.order))
	for i, addr := range p.order {
		out[i] = k8stypes.NamespacedName{Namespace: poolNamespace, Name: addr}
	}
	return out
}

// PoolGet reports no InferencePool: the bench has no cluster. GIE's request path does not call it.
func (p *pool) PoolGet() (*datalayer.EndpointPool, error) {
	return nil, errors.New("gie bench pool: no InferencePool object")
}

// ObjectiveGet finds no InferenceObjective: the Director then uses priority 0.
func (p *pool) ObjectiveGet(string) *v1alpha2.InferenceObjective { return nil }

// PodList returns the fleet's endpoints that satisfy pred, in fleet order.
func (p *pool) PodList(pred func(fwkdl.Endpoint) bool) []fwkdl.Endpoint {
	out := make([]fwkdl.Endpoint, 0, len(p.order))
	for _, addr := range p.order {
		if ep := p.byAddr[addr]; pred(ep) {
			out = append(out, ep)
		}
	}
	return out
}

// ModelRewriteGet finds no InferenceModelRewrite: requests keep their model.
func (p *pool) ModelRewriteGet(string) (*v1alpha2.InferenceModelRewriteRule, string) { return nil, "" }
