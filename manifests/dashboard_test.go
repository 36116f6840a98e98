package manifests_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/internal/testnet"
	"github.com/loadaware/loadaware-epp/lmcache"
	epppicker "github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/tokenize"
)

const dashboardFile = chart + "/files/grafana-dashboard.json"

// dashboard is the part of Grafana's classic dashboard JSON model the checks read.
type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	GridPos    *gridPos    `json:"gridPos"`
	Datasource *datasource `json:"datasource"`
	Targets    []target    `json:"targets"`
	Panels     []panel     `json:"panels"` // a collapsed row's panels
	Collapsed  bool        `json:"collapsed"`
}

type gridPos struct{ H, W, X, Y int }

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

// panelTypes are the panel plugins built into Grafana that the dashboard may use.
var panelTypes = []string{"row", "timeseries", "stat", "gauge", "bargauge", "table", "text", "heatmap"}

// readDashboard decodes the shipped dashboard strictly (unknown top-level shapes are kept
// out by the struct; malformed JSON fails).
func readDashboard(t *testing.T) (dashboard, []byte) {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is not dashboard JSON: %v", dashboardFile, err)
	}
	return d, raw
}

// chartSchemaVersion is the dashboard schema version Chart.yaml declares.
func chartSchemaVersion(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(chart + "/Chart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(c.Annotations["loadaware-epp/grafana-schema-version"])
	if err != nil {
		t.Fatalf("Chart.yaml annotation loadaware-epp/grafana-schema-version: %v", err)
	}
	return v
}

// allPanels flattens rows: the top-level panels and those inside collapsed rows.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// checkDashboard applies the structural rules of Grafana's classic dashboard model at
// schemaVersion want: what an import needs to place and query every panel.
func checkDashboard(d dashboard, want int) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if d.SchemaVersion != want {
		bad("schemaVersion %d, the chart declares %d", d.SchemaVersion, want)
	}
	if d.UID == "" || len(d.UID) > 40 || d.Title == "" {
		bad("uid %q (1 to 40 characters) and title %q must be set", d.UID, d.Title)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || (v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !hasDS {
		bad("no templating variable datasource of type datasource for prometheus")
	}
	ids := map[int]string{}
	var placed []panel
	for _, p := range allPanels(d.Panels) {
		name := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if p.ID <= 0 {
			bad("%s: id must be a positive integer", name)
		} else if other, dup := ids[p.ID]; dup {
			bad("%s: id already used by %q", name, other)
		}
		ids[p.ID] = p.Title
		if !slices.Contains(panelTypes, p.Type) {
			bad("%s: type %q is not one of %v", name, p.Type, panelTypes)
		}
		if g := p.GridPos; g == nil || g.H <= 0 || g.W <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			bad("%s: gridPos %+v must lie in the 24-column grid", name, p.GridPos)
		} else {
			placed = append(placed, p)
		}
		if p.Type == "row" {
			if len(p.Panels) > 0 && !p.Collapsed {
				bad("%s: an open row holds no panels (they follow it at the top level)", name)
			}
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			bad("%s: datasource %+v, want prometheus ${datasource}", name, p.Datasource)
		}
		if len(p.Targets) == 0 {
			bad("%s: no targets", name)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.RefID == "" || refs[tg.RefID] {
				bad("%s: target refId %q empty or repeated", name, tg.RefID)
			}
			refs[tg.RefID] = true
			if strings.TrimSpace(tg.Expr) == "" {
				bad("%s: target %s has no expr", name, tg.RefID)
			}
			if tg.Datasource != nil && p.Datasource != nil && *tg.Datasource != *p.Datasource {
				bad("%s: target %s datasource %+v differs from the panel's", name, tg.RefID, tg.Datasource)
			}
		}
	}
	for i, a := range placed {
		for _, b := range placed[i+1:] {
			ga, gb := a.GridPos, b.GridPos
			if ga.X < gb.X+gb.W && gb.X < ga.X+ga.W && ga.Y < gb.Y+gb.H && gb.Y < ga.Y+ga.H {
				bad("panels %d and %d overlap: %+v, %+v", a.ID, b.ID, *ga, *gb)
			}
		}
	}
	return errs
}

// exported maps every series name the picker exports to the label names it carries.
type exported map[string]map[string]bool

func (e exported) add(name string, labels []*dto.LabelPair, extra ...string) {
	if e[name] == nil {
		e[name] = map[string]bool{}
	}
	for _, l := range labels {
		e[name][l.GetName()] = true
	}
	for _, l := range extra {
		e[name][l] = true
	}
}

// exportedSeries turns gathered families into series names as PromQL sees them:
// histograms as _bucket (with le), _sum and _count; summaries with quantile, _sum, _count.
func exportedSeries(mfs []*dto.MetricFamily) exported {
	e := exported{}
	for _, mf := range mfs {
		n := mf.GetName()
		for _, m := range mf.GetMetric() {
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				e.add(n+"_bucket", m.GetLabel(), "le")
				e.add(n+"_sum", m.GetLabel())
				e.add(n+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				e.add(n, m.GetLabel(), "quantile")
				e.add(n+"_sum", m.GetLabel())
				e.add(n+"_count", m.GetLabel())
			default:
				e.add(n, m.GetLabel())
			}
		}
	}
	return e
}

// grafanaVars are the Grafana variables a query may use, with a value PromQL accepts.
var grafanaVars = map[string]string{"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}

var anyVar = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

// checkQuery parses expr with Prometheus' parser and reports a metric or a label that
// the picker does not export: in a selector, a matcher, by/without, or on/ignoring.
func checkQuery(expr string, e exported) error {
	for v, val := range grafanaVars {
		expr = strings.ReplaceAll(expr, v, val)
	}
	if v := anyVar.FindString(expr); v != "" {
		return fmt.Errorf("unknown Grafana variable %s (known: $__rate_interval, $__interval, $__range)", v)
	}
	root, err := parser.ParseExpr(expr)
	if err != nil {
		return fmt.Errorf("not PromQL: %w", err)
	}
	var errs []error
	labelsUnder := func(n parser.Node) map[string]bool {
		out := map[string]bool{}
		parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				for l := range e[selectorName(vs)] {
					out[l] = true
				}
			}
			return nil
		})
		return out
	}
	need := func(where string, labels []string, have map[string]bool) {
		for _, l := range labels {
			if !have[l] {
				errs = append(errs, fmt.Errorf("%s names label %q, which none of its series carries (%v)", where, l, sortedKeys(have)))
			}
		}
	}
	parser.Inspect(root, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			name := selectorName(n)
			labels, ok := e[name]
			if !ok {
				errs = append(errs, fmt.Errorf("metric %q is not exported by the picker", name))
				return nil
			}
			for _, m := range n.LabelMatchers {
				if m.Name != "__name__" && !labels[m.Name] {
					errs = append(errs, fmt.Errorf("metric %s has no label %q (it has %v)", name, m.Name, sortedKeys(labels)))
				}
			}
		case *parser.AggregateExpr:
			need(n.Op.String()+" by/without", n.Grouping, labelsUnder(n.Expr))
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				lhs, rhs := labelsUnder(n.LHS), labelsUnder(n.RHS)
				if vm.On { // on(...) matches on labels both sides carry
					need("on() left side", vm.MatchingLabels, lhs)
					need("on() right side", vm.MatchingLabels, rhs)
				}
				need("group_left/right", vm.Include, labelsUnder(n))
			}
		}
		return nil
	})
	return errors.Join(errs...)
}

func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == "__name__" {
			return m.Value
		}
	}
	return ""
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestDashboardStructure(t *testing.T) {
	d, _ := readDashboard(t)
	for _, err := range checkDashboard(d, chartSchemaVersion(t)) {
		t.Error(err)
	}
	if n := len(allPanels(d.Panels)); n < 10 {
		t.Errorf("dashboard has %d panels", n)
	}
}

// TestDashboardQueriesUseExportedSeries starts the picker, drives every decision path
// whose metrics have labels, gathers its registry, and checks every panel's PromQL
// against what it exports.
func TestDashboardQueriesUseExportedSeries(t *testing.T) {
	d, _ := readDashboard(t)
	mfs, err := drivenPicker(t).Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	e := exportedSeries(mfs)
	queries := 0
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			queries++
			if err := checkQuery(tg.Expr, e); err != nil {
				t.Errorf("panel %d %q, target %s: %s\n%v", p.ID, p.Title, tg.RefID, tg.Expr, err)
			}
		}
	}
	if queries == 0 {
		t.Fatal("no queries checked")
	}
}

// TestCheckQueryRejects keeps the query check honest: each mistake must be caught.
func TestCheckQueryRejects(t *testing.T) {
	e := exported{
		"loadaware_decisions_total":                   {"policy": true, "reason": true},
		"loadaware_decision_duration_seconds_bucket":  {"le": true},
		"loadaware_routed_prompt_tokens_total":        {"endpoint": true, "source": true},
		"loadaware_routed_matched_tokens_total":       {"endpoint": true, "source": true},
		"loadaware_extproc_immediate_responses_total": {"code": true},
	}
	tests := []struct {
		name, expr, want string
	}{
		{"accepted", `sum by (policy) (rate(loadaware_decisions_total{reason="load-balance"}[$__rate_interval]))`, ""},
		{"accepted ratio", `sum by (endpoint) (rate(loadaware_routed_matched_tokens_total[5m])) / on (endpoint) sum by (endpoint) (rate(loadaware_routed_prompt_tokens_total[5m]))`, ""},
		{"unknown metric", `rate(loadaware_decision_total[5m])`, `"loadaware_decision_total" is not exported`},
		{"histogram without its suffix", `loadaware_decision_duration_seconds`, "not exported"},
		{"unknown matcher label", `loadaware_decisions_total{kind="x"}`, `no label "kind"`},
		{"unknown grouping label", `sum by (endpoint) (loadaware_decisions_total)`, `label "endpoint"`},
		{"le lost under histogram_quantile", `histogram_quantile(0.9, sum by (le, phase) (rate(loadaware_decision_duration_seconds_bucket[5m])))`, `label "phase"`},
		{"unknown on label", `loadaware_decisions_total / on (code) loadaware_extproc_immediate_responses_total`, `label "code"`},
		{"name matcher", `{__name__="loadaware_nope"}`, "not exported"},
		{"syntax", `sum by (policy (loadaware_decisions_total)`, "not PromQL"},
		{"unknown Grafana variable", `rate(loadaware_decisions_total[$interval])`, "unknown Grafana variable $interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkQuery(tt.expr, e)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("checkQuery(%s) = %v, want nil", tt.expr, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("checkQuery(%s) = %v, want an error containing %q", tt.expr, err, tt.want)
			}
		})
	}
}

// TestCheckDashboardRejects keeps the structural check honest.
func TestCheckDashboardRejects(t *testing.T) {
	good, _ := readDashboard(t)
	want := chartSchemaVersion(t)
	if errs := checkDashboard(good, want); len(errs) != 0 {
		t.Fatalf("the shipped dashboard fails: %v", errs)
	}
	first := func(d *dashboard) *panel {
		for i := range d.Panels {
			if d.Panels[i].Type != "row" {
				return &d.Panels[i]
			}
		}
		t.Fatal("no panel")
		return nil
	}
	tests := []struct {
		name   string
		mutate func(d *dashboard)
		want   string
	}{
		{"other schema version", func(d *dashboard) { d.SchemaVersion = want + 1 }, "schemaVersion"},
		{"no id", func(d *dashboard) { first(d).ID = 0 }, "positive integer"},
		{"duplicate id", func(d *dashboard) { d.Panels[1].ID = d.Panels[0].ID }, "already used"},
		{"no gridPos", func(d *dashboard) { first(d).GridPos = nil }, "gridPos"},
		{"off the grid", func(d *dashboard) { g := *first(d).GridPos; g.X = 20; first(d).GridPos = &g }, "gridPos"},
		{"overlap", func(d *dashboard) { g := *d.Panels[2].GridPos; d.Panels[3].GridPos = &g }, "overlap"},
		{"no datasource", func(d *dashboard) { first(d).Datasource = nil }, "datasource"},
		{"no targets", func(d *dashboard) { first(d).Targets = nil }, "no targets"},
		{"empty expr", func(d *dashboard) { first(d).Targets = []target{{RefID: "A"}} }, "no expr"},
		{"unknown panel type", func(d *dashboard) { first(d).Type = "graph" }, "type"},
		{"no datasource variable", func(d *dashboard) { d.Templating.List = nil }, "templating"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := readDashboard(t)
			tt.mutate(&d)
			errs := checkDashboard(d, want)
			if !strings.Contains(fmt.Sprint(errs), tt.want) {
				t.Fatalf("checkDashboard = %v, want an error containing %q", errs, tt.want)
			}
		})
	}
}

// TestChartShipsDashboard renders the chart with the dashboard on: one ConfigMap with the
// sidecar's label and the file's exact JSON.
func TestChartShipsDashboard(t *testing.T) {
	_, raw := readDashboard(t)
	r := render(t, release, "--set", "grafanaDashboard.enabled=true", "--set", "grafanaDashboard.namespace=monitoring",
		"--set", "grafanaDashboard.annotations.grafana_folder=inference")
	cm := get[corev1.ConfigMap](r, "ConfigMap", picker+"-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "inference" {
		t.Errorf("dashboard ConfigMap metadata = %+v", cm.ObjectMeta)
	}
	if got := cm.Data["loadaware-epp.json"]; got != strings.TrimRight(string(raw), "\n") {
		t.Errorf("the ConfigMap's JSON differs from %s", dashboardFile)
	}
}

// drivenPicker starts the picker with the LMCache controller and an engine tokenizer, on
// loopback ports, and drives one request down each path that gives a labelled metric its
// first child.
func drivenPicker(t *testing.T) *app.App {
	t.Helper()
	// Two engines that only tokenize: a prompt "fail" gets a 500 (the fallback path).
	engine := func() string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var in struct{ Prompt string }
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Prompt == "fail" {
				http.Error(w, "cannot tokenize", http.StatusInternalServerError)
				return
			}
			fmt.Fprint(w, `{"tokens":[1,2,3]}`)
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	eps := []string{engine(), engine()}
	tok := &epppicker.Tokens{Engine: &tokenize.EngineClient{Timeout: time.Second}}
	a, err := app.Start(t.Context(), app.Config{
		GRPCAddr: "127.0.0.1:0", HealthAddr: "-", MetricsAddr: "127.0.0.1:0", Endpoints: eps,
		LMCache: &app.LMCacheConfig{PullAddr: "127.0.0.1:0", Keys: lmcache.KeyConfig{HashSeed: "123"}},
		// Both cache sources, so the vLLM KV events panels' series exist (no engine publishes:
		// the subscriber connects and waits).
		CacheSource: epppicker.SourceBoth,
		KVEvents:    &app.KVEventsConfig{Port: refusedPort(t)},
		Tokenizer:   tok,
		// The cache-signal alarm, ticked below on a clock of the test's, and its parity
		// sampler (registered, never due).
		CacheAlarm: &app.CacheAlarmConfig{Window: time.Minute, MinPrompts: 1, Every: -1, ParityInterval: time.Hour},
		TokenizerMetrics: func(reg prometheus.Registerer) error {
			m, err := tokenize.NewMetrics(reg, nil)
			tok.Metrics = m
			return err
		},
	}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	client := extprocv3.NewExternalProcessorClient(conn)

	// exchange sends msgs on a new stream and returns the first answer or the stream's error.
	exchange := func(msgs ...*extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, error) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		st, err := client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := st.Send(m); err != nil {
				t.Fatal(err)
			}
		}
		return st.Recv()
	}
	headers := func(eos bool) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			EndOfStream: eos, Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				{Key: ":method", RawValue: []byte("POST")}, {Key: ":path", RawValue: []byte("/v1/completions")}}}}}}
	}
	body := func(b string) *extprocv3.ProcessingRequest {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: true}}}
	}
	tokens := func(n, seed int) string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = strconv.Itoa(1000 + seed*n + i)
		}
		return `{"model":"m","prompt":[` + strings.Join(ids, ",") + `]}`
	}
	routed := func(what string, msgs ...*extprocv3.ProcessingRequest) *extprocv3.ProcessingResponse {
		t.Helper()
		resp, err := exchange(msgs...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return resp
	}

	// Routed with token ids (decisions, latency, cache share, LMCache lookups); eight of them
	// to one IP so that the silent-miss detector can judge it below, and the cache-signal
	// alarm (no engine sends cache events) one window after its first tick.
	alarmStart := time.Now()
	a.TickCacheAlarm(alarmStart)
	for i := range 8 {
		if r := routed("token-id prompt", headers(false), body(tokens(512, i))); r.GetRequestHeaders() == nil {
			t.Fatalf("token-id prompt: answer %v, want the routed headers", r)
		}
	}
	// Text prompts tokenized by an engine (tokenize latency), and one it cannot tokenize
	// (fallback, untokenized).
	routed("text prompt", headers(false), body(`{"model":"m","prompt":"hello"}`))
	routed("untokenizable prompt", headers(false), body(`{"model":"m","prompt":"fail"}`))
	// A client error (ImmediateResponse by code).
	if r := routed("bad body", headers(false), body(`{`)); r.GetImmediateResponse() == nil {
		t.Fatalf("bad body: answer %v, want an ImmediateResponse", r)
	}
	// A subset hint naming no endpoint (pick error by kind).
	hinted := headers(false)
	hinted.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"envoy.lb.subset_hint": {
		Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-subset": structpb.NewStringValue("10.9.9.9:1")}}}}
	routed("unmatched subset", hinted, body(tokens(4, 99)))
	// A body mode that sends no body (unread bodies by mode).
	noBody := headers(false)
	noBody.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: filterv3.ProcessingMode_NONE}
	routed("body mode NONE", noBody)
	// A protocol violation (stream errors by kind): the error arrives after it was counted.
	if _, err := exchange(headers(false), headers(false)); err == nil {
		t.Fatal("headers twice: the stream did not fail")
	}
	// A configuration change without the admin token (changes by outcome).
	resp, err := http.Post("http://"+a.MetricsAddr()+"/admin/config", "application/json", strings.NewReader(`{"beta":2}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST /admin/config without a token: %d, want 403", resp.StatusCode)
	}
	if al := a.TickCacheAlarm(alarmStart.Add(time.Minute)); len(al) == 0 {
		t.Fatal("no endpoint in cache-signal alarm after a silent window of routed prompts")
	}
	// An engine at that IP that stores chunks none of the prompts sent to it has (silent miss).
	now := time.Now()
	if err := a.LMCacheIndex.Apply(lmcache.RegisterMsg{InstanceID: "blind", IP: "127.0.0.1", Port: 8000}, now); err != nil {
		t.Fatal(err)
	}
	for k := range int64(200) {
		if err := a.LMCacheIndex.Apply(lmcache.KVAdmitMsg{InstanceID: "blind", Key: 7_000_000 + k, Location: "cpu"}, now); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// refusedPort returns a loopback TCP port nothing listens on, nor can, until t ends.
func refusedPort(t *testing.T) int {
	t.Helper()
	_, p, err := net.SplitHostPort(testnet.RefusedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return port
}
