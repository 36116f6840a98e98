package vtime

import (
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/bench/peers/gie"
)

// gieRefresh is GIE's default metrics refresh interval (its
// --refresh-metrics-interval): how often its data layer scrapes each engine.
const gieRefresh = 50 * time.Millisecond

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
// the engines' metrics as its scraper last saw them.
type gieArm struct {
	p       *gie.Picker
	seen    map[string]gie.Metrics // the last scrape, by address
	last    time.Duration          // when the last scrape happened
	scraped bool                   // a scrape has happened
	due     bool                   // the next scrape is in the event queue
}

// scrape reads every engine's metrics now, as vLLM's /metrics shows them.
func (w *world) scrape() {
	g := w.gie
	for i, e := range w.engines {
		m, c := e.Metrics(), e.Config()
		g.seen[w.addrs[i]] = gie.Metrics{
			Waiting: m.Waiting, Running: m.Running, KVCacheUsage: min(max(m.KVUsage, 0), 1),
			CacheBlockSize: c.BlockSize, CacheNumBlocks: c.Blocks(),
			MaxLoRA: m.MaxLoRAs, RunningAdapters: m.RunningAdapters, WaitingAdapters: m.WaitingAdapters,
		}
	}
	g.last, g.scraped = w.now, true
}

// onScrape takes a scheduled scrape and schedules the next one while work
// remains (open requests or a busy engine); an idle fleet stops the clock
// until the next send (see pickGIE).
func (w *world) onScrape(open int) {
	w.scrape()
	if open > 0 || w.anyBusy() {
		w.push(event{at: w.now + gieRefresh, kind: evScrape})
		return
	}
	w.gie.due = false
}

// pickGIE asks GIE where p goes, with the metrics of the last scrape on GIE's
// refresh grid (multiples of gieRefresh). After an idle spell, when no scrape
// was scheduled, the fleet has not changed since it went idle, so the scrape
// the grid would have taken at its latest tick reads what the engines show now.
func (w *world) pickGIE(p *pending) (string, error) {
	g := w.gie
	if !g.due {
		tick := w.now - w.now%gieRefresh
		if !g.scraped || tick > g.last {
			w.scrape()
			g.last = tick
		}
		w.push(event{at: g.last + gieRefresh, kind: evScrape})
		g.due = true
	}
	// The model (GIE's request parser requires one; with no InferenceObjectives or
	// rewrites it passes through) is the adapter's name for an adapter's request,
	// which GIE's LoRA affinity scorer looks for among the engines' adapters.
	d, err := g.p.Pick(gie.CompletionRequest(requestID(p), modelOf(p.req), p.req.Text), g.seen)
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
