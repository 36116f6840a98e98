package vtime

import (
	"fmt"

	"github.com/loadaware/loadaware-epp/bench/peers/gie"
)

// gieLoRAConfig is the gie+residency arm's profile: GIE v1.5.0's default
// (queue and KV-cache utilization scorers at weight 2, prefix cache at 3) plus
// its lora-affinity-scorer, which GIE ships opt-in, at weight 2.
const gieLoRAConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: lora-affinity-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: lora-affinity-scorer
    weight: 2
  - pluginRef: max-score-picker
`

// gieArm is the gie arm's router: GIE's own scheduler (bench/peers/gie) and
// the engines' metrics as its scraper last saw them (the world's scrapeGrid,
// on GIE's default 50 ms refresh).
type gieArm struct {
	p    *gie.Picker
	seen map[string]gie.Metrics // the last scrape, by address
}

// fill converts the last scrape into GIE's metrics, as GIE's extractor reads
// vLLM's /metrics (vllm:cache_config_info gives the block size and pool).
func (g *gieArm) fill(w *world) {
	for i, m := range w.scr.seen {
		c := w.engines[i].Config()
		g.seen[w.addrs[i]] = gie.Metrics{
			Waiting: m.Waiting, Running: m.Running, KVCacheUsage: min(max(m.KVUsage, 0), 1),
			CacheBlockSize: c.BlockSize, CacheNumBlocks: c.Blocks(),
			MaxLoRA: m.MaxLoRAs, RunningAdapters: m.RunningAdapters, WaitingAdapters: m.WaitingAdapters,
		}
	}
}

// pickGIE asks GIE where p goes, with the metrics of the last scrape on GIE's
// refresh grid (multiples of scrapeEvery).
func (w *world) pickGIE(p *pending) (string, error) {
	w.scrapeBeforePick()
	// The model (GIE's request parser requires one; with no InferenceObjectives or
	// rewrites it passes through) is the adapter's name for an adapter's request,
	// which GIE's LoRA affinity scorer looks for among the engines' adapters.
	d, err := w.gie.p.Pick(gie.CompletionRequest(requestID(p), modelOf(p.req), p.req.Text), w.gie.seen)
	if err != nil {
		return "", err
	}
	return d.Endpoint, nil
}

// gieDone tells GIE that request id's response has ended.
func (w *world) gieDone(id string) error {
	if err := w.gie.p.Done(id); err != nil {
		return fmt.Errorf("vtime: arm gie: %w", err)
	}
	return nil
}

// requestID is the x-request-id of p.
func requestID(p *pending) string { return fmt.Sprintf("req-%d", p.req.Index) }
