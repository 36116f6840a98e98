package app

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/loadaware/loadaware-epp/picker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (a *App) httpHandler(adm *admin) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(a.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !a.Fleet.Synced() {
			http.Error(w, "not ready: the endpoint set is not known yet (pass --endpoints or wait for discovery)", http.StatusServiceUnavailable)
			return
		}
		select {
		case <-a.kvEventsReady():
		default:
			http.Error(w, "not ready: rebuilding the vLLM KV events index from the engines' replay sockets (at most --kv-events-replay-timeout per engine)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ready: %d endpoints\n", len(a.Fleet.Endpoints()))
	})
	mux.Handle("/admin/config", adm)
	mux.HandleFunc("GET /admin/state", a.serveState)
	mux.HandleFunc("POST /admin/lookup", a.serveLookup)
	return mux
}

// admin serves GET and POST /admin/config: read, or change at run time, the policy and beta.
type admin struct {
	picker  *picker.Picker
	token   string
	log     *slog.Logger
	changes *prometheus.CounterVec
	beta    prometheus.GaugeFunc
	policy  *prometheus.GaugeVec
}

func newAdmin(p *picker.Picker, token string, log *slog.Logger, reg prometheus.Registerer) (*admin, error) {
	a := &admin{picker: p, token: token, log: log,
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_config_changes_total",
			Help: "Run-time configuration change requests on /admin/config, by outcome (applied, invalid, unauthorized, disabled).",
		}, []string{"outcome"}),
		beta: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "loadaware_beta", Help: "The loadaware policy's beta in force.",
		}, func() float64 { return p.Config().Beta }),
		policy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "loadaware_policy_info", Help: "1 for the routing policy in force.",
		}, []string{"policy"}),
	}
	a.policy.WithLabelValues(p.Config().Policy).Set(1)
	for _, c := range []prometheus.Collector{a.changes, a.beta, a.policy} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// configChange is the POST body: either field may be left out to keep its value.
type configChange struct {
	Policy *string  `json:"policy"`
	Beta   *float64 `json:"beta"`
}

func (a *admin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, a.picker.Config())
	case http.MethodPost:
		a.post(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "use GET to read the configuration or POST to change it", http.StatusMethodNotAllowed)
	}
}

func (a *admin) post(w http.ResponseWriter, r *http.Request) {
	if !authorized(w, r, a.token, "changing the configuration at run time") {
		outcome := "unauthorized"
		if a.token == "" {
			outcome = "disabled"
		}
		a.changes.WithLabelValues(outcome).Inc()
		return
	}
	var ch configChange
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ch); err != nil {
		a.changes.WithLabelValues("invalid").Inc()
		http.Error(w, fmt.Sprintf(`the body must be JSON like {"policy": "loadaware", "beta": 1.5} (either field may be left out): %v`, err), http.StatusBadRequest)
		return
	}
	old := a.picker.Config()
	next := old
	if ch.Policy != nil {
		next.Policy = *ch.Policy
	}
	if ch.Beta != nil {
		next.Beta = *ch.Beta
	}
	if err := a.picker.SetConfig(next); err != nil {
		a.changes.WithLabelValues("invalid").Inc()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.changes.WithLabelValues("applied").Inc()
	a.policy.Reset()
	a.policy.WithLabelValues(next.Policy).Set(1)
	a.log.Info("configuration changed at run time", "policy", next.Policy, "beta", next.Beta,
		"old_policy", old.Policy, "old_beta", old.Beta, "from", r.RemoteAddr)
	writeJSON(w, http.StatusOK, next)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
