package fleet

import "github.com/prometheus/client_golang/prometheus"

var (
	inflightDesc = prometheus.NewDesc("loadaware_inflight_requests",
		"Requests this picker booked on an endpoint and has not seen finish, by phase (prefill: no response byte yet; decode: streaming).",
		[]string{"endpoint", "phase"}, nil)
	endpointsDesc = prometheus.NewDesc("loadaware_endpoints",
		"Endpoints in the current endpoint set.", nil, nil)
	imbalanceDesc = prometheus.NewDesc("loadaware_load_imbalance",
		"Mean in-flight of the busiest endpoint divided by that of the idlest over the sliding window (1 = even; +Inf = some endpoint idle while another is loaded).", nil, nil)
)

// Collector exports a Set's loads and an Imbalance tracker to Prometheus.
type Collector struct {
	Set       *Set
	Imbalance *Imbalance // may be nil
}

// Describe implements prometheus.Collector.
func (c Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inflightDesc
	ch <- endpointsDesc
	if c.Imbalance != nil {
		ch <- imbalanceDesc
	}
}

// Collect implements prometheus.Collector.
func (c Collector) Collect(ch chan<- prometheus.Metric) {
	all := c.Set.All()
	for _, l := range all {
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(l.Prefill), l.Addr, "prefill")
		ch <- prometheus.MustNewConstMetric(inflightDesc, prometheus.GaugeValue, float64(l.Decode), l.Addr, "decode")
	}
	ch <- prometheus.MustNewConstMetric(endpointsDesc, prometheus.GaugeValue, float64(len(all)))
	if c.Imbalance != nil {
		ch <- prometheus.MustNewConstMetric(imbalanceDesc, prometheus.GaugeValue, c.Imbalance.Value())
	}
}
