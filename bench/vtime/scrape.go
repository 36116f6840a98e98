package vtime

import (
	"slices"
	"time"

	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/lora"
	"github.com/loadaware/loadaware-epp/scoring"
)

// scrapeEvery is how often a router scrapes each engine's /metrics in virtual
// time: GIE's default refresh (its --refresh-metrics-interval, 50 ms), which
// is also the picker's default (--refresh-metrics-interval).
const scrapeEvery = enginemetrics.DefaultInterval

// scrapeGrid is the engines' metrics as a scraper on a fixed grid of virtual
// time last saw them: what the gie arm's data layer and the picker's
// enginemetrics.Scraper read. Between ticks the numbers are stale, as a real
// scrape's are.
type scrapeGrid struct {
	seen []sim.Metrics // the last scrape, by engine
	// moved is, by engine, when a scrape last saw its ranks' gauges differ from the
	// scrape before (the stamp of RankLoads).
	moved   []time.Duration
	speed   []enginemetrics.PrefillSpeed // each engine's prefill speed, updated at each scrape
	firsts  float64                      // the fleet's first tokens the scrapes counted
	last    time.Duration                // when the last scrape happened
	scraped bool                         // a scrape has happened
	due     bool                         // the next scrape is in the event queue
}

// scrape reads every engine's metrics now, as vLLM's /metrics shows them.
func (w *world) scrape() {
	g := w.scr
	for i, e := range w.engines {
		m := e.Metrics()
		if len(g.moved) < len(g.seen) {
			g.moved = make([]time.Duration, len(g.seen))
		}
		if !slices.Equal(m.Ranks, g.seen[i].Ranks) {
			g.moved[i] = w.now
		}
		g.seen[i] = m
		c := w.firsts[i].finished
		c.Known = true
		g.firsts += g.speed[i].Observe(c)
	}
	var peers enginemetrics.Peers[int]
	for i := range g.speed {
		peers.Add(i, g.speed[i].Slowdown())
	}
	for i, m := range g.seen {
		g.speed[i].Age(g.firsts, len(g.seen), m.Running == 0 && m.Waiting == 0, peers.Of(i))
	}
	g.last, g.scraped = w.now, true
	if w.adapters != nil {
		for i, m := range g.seen {
			w.adapters.Set(w.addrs[i], lora.Info{MaxLoRA: m.MaxLoRAs, Running: m.RunningAdapters, Waiting: m.WaitingAdapters})
		}
	}
	if w.gie != nil {
		w.gie.fill(w)
	}
}

// onScrape takes a scheduled scrape and schedules the next one while work
// remains (open requests or a busy engine); an idle fleet stops the clock
// until the next send (see scrapeBeforePick).
func (w *world) onScrape(open int) {
	w.scrape()
	if open > 0 || w.anyBusy() {
		w.push(event{at: w.now + scrapeEvery, kind: evScrape})
		return
	}
	w.scr.due = false
}

// scrapeBeforePick brings the scrape up to date before a routing decision.
// After an idle spell, when no scrape was scheduled, the fleet has not
// changed since it went idle, so the scrape the grid would have taken at its
// latest tick reads what the engines show now.
func (w *world) scrapeBeforePick() {
	g := w.scr
	if g.due {
		return
	}
	tick := w.now - w.now%scrapeEvery
	if !g.scraped || tick > g.last {
		w.scrape()
		g.last = tick
	}
	w.push(event{at: g.last + scrapeEvery, kind: evScrape})
	g.due = true
}

// engineView is the picker's view of the scrape grid (picker.EngineView).
type engineView struct{ w *world }

// Engine implements picker.EngineView: addr's metrics at the last scrape, aged
// to now; not known before the first scrape or for an address not simulated.
func (v engineView) Engine(addr string, now time.Time) scoring.EngineMetrics {
	g := v.w.scr
	if g == nil || !g.scraped {
		return scoring.EngineMetrics{}
	}
	for i, a := range v.w.addrs {
		if a == addr {
			m := g.seen[i]
			c := v.w.engines[i].Config() // vllm:cache_config_info
			return scoring.EngineMetrics{Known: true, Running: m.Running, Waiting: m.Waiting,
				KVUsage: min(max(m.KVUsage, 0), 1), KVPoolTokens: c.Blocks() * c.BlockSize,
				PrefillSlowdown: g.speed[i].Slowdown(), Age: max(now.Sub(epoch.Add(g.last)), 0)}
		}
	}
	return scoring.EngineMetrics{}
}

// RankLoads implements picker.RankEngineView: each data-parallel rank's
// waiting (as Prefill) and running (as Decode) at the last scrape, stamped with the virtual time of the
// scrape that first showed these gauges (a scrape between two of the engine's
// updates shows nothing new); not known before the first scrape or for an
// engine of one rank.
func (v engineView) RankLoads(addr string, dst []fleet.Load) ([]fleet.Load, int64, bool) {
	g := v.w.scr
	if g == nil || !g.scraped {
		return dst, 0, false
	}
	for i, a := range v.w.addrs {
		if a == addr {
			if len(g.seen[i].Ranks) == 0 {
				return dst, 0, false
			}
			for _, r := range g.seen[i].Ranks {
				dst = append(dst, fleet.Load{Addr: addr, Prefill: r.Waiting, Decode: r.Running})
			}
			return dst, epoch.Add(g.moved[i]).UnixNano(), true
		}
	}
	return dst, 0, false
}

// newScrapeGrid returns a grid for n engines, none of them scraped yet.
func newScrapeGrid(n int) *scrapeGrid {
	return &scrapeGrid{seen: make([]sim.Metrics, n), speed: make([]enginemetrics.PrefillSpeed, n)}
}
