package kube

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

const ns = "llm"

var poolGVR = schema.GroupVersionResource{Group: DefaultPoolGroup, Version: "v1", Resource: "inferencepools"}

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

func notReady(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
func noIP(p *corev1.Pod)     { p.Status.PodIP = "" }
func terminating(p *corev1.Pod) {
	p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
}
func noConditions(p *corev1.Pod) { p.Status.Conditions = nil }
func inNamespace(n string) podOpt {
	return func(p *corev1.Pod) { p.Namespace = n }
}
func withLabels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

// pod returns a Ready pod labelled app=vllm.
func pod(name, ip string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "vllm"}},
		Status: corev1.PodStatus{
			PodIP:      ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// pool returns an InferencePool v1 object.
func pool(name string, matchLabels map[string]any, ports ...int64) *unstructured.Unstructured {
	tp := make([]any, len(ports))
	for i, p := range ports {
		tp[i] = map[string]any{"number": p}
	}
	spec := map[string]any{"targetPorts": tp}
	if matchLabels != nil {
		spec["selector"] = map[string]any{"matchLabels": matchLabels}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": DefaultPoolGroup + "/v1",
		"kind":       "InferencePool",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec":       spec,
	}}
}

// harness runs a Watcher against fake clients and records its calls.
type harness struct {
	t       *testing.T
	client  *fake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	w       *Watcher
	updates chan []string
	logs    *syncBuffer
	done    chan error
	cancel  context.CancelFunc
}

// syncBuffer is a log sink that tests can wait on.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // poked after every write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		select {
		case s.written <- struct{}{}:
		default:
		}
	}()
	return s.b.Write(p)
}

// waitFor blocks until the log contains substr, or fails after 10s.
func (s *syncBuffer) waitFor(t *testing.T, substr string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for !strings.Contains(s.String(), substr) {
		select {
		case <-s.written:
		case <-timeout:
			t.Fatalf("log never contained %q:\n%s", substr, s)
		}
	}
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func start(t *testing.T, cfg Config, pods []*corev1.Pod, pools ...*unstructured.Unstructured) *harness {
	t.Helper()
	objs := make([]runtime.Object, len(pods))
	for i, p := range pods {
		objs[i] = p
	}
	dynObjs := make([]runtime.Object, len(pools))
	for i, p := range pools {
		dynObjs[i] = p
	}
	h := &harness{
		t:       t,
		client:  fake.NewClientset(objs...),
		dyn:     dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{poolGVR: "InferencePoolList"}, dynObjs...),
		updates: make(chan []string, 64),
		logs:    &syncBuffer{written: make(chan struct{}, 1)},
		done:    make(chan error, 1),
	}
	w, err := NewWatcher(cfg, h.client, h.dyn, slog.New(slog.NewTextHandler(h.logs, nil)))
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	h.w = w
	ctx, cancel := context.WithCancel(t.Context())
	h.cancel = cancel
	go func() { h.done <- w.Run(ctx, func(eps []string) { h.updates <- eps }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-h.done; err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	})
	return h
}

// next waits for the next onChange call.
func (h *harness) next() []string {
	h.t.Helper()
	select {
	case eps := <-h.updates:
		return eps
	case <-time.After(10 * time.Second):
		h.t.Fatalf("no endpoint update within 10s; logs:\n%s", h.logs)
		return nil
	}
}

// expect waits for the next onChange call and compares it with want.
func (h *harness) expect(want ...string) {
	h.t.Helper()
	if want == nil {
		want = []string{}
	}
	if got := h.next(); !slices.Equal(got, want) {
		h.t.Fatalf("endpoints = %q, want %q", got, want)
	}
}

func (h *harness) update(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Pods(p.Namespace).Update(h.t.Context(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatalf("update pod: %v", err)
	}
}

func (h *harness) create(p *corev1.Pod) {
	h.t.Helper()
	if _, err := h.client.CoreV1().Pods(p.Namespace).Create(h.t.Context(), p, metav1.CreateOptions{}); err != nil {
		h.t.Fatalf("create pod: %v", err)
	}
}

func (h *harness) delete(name string) {
	h.t.Helper()
	if err := h.client.CoreV1().Pods(ns).Delete(h.t.Context(), name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatalf("delete pod: %v", err)
	}
}

func (h *harness) updatePool(p *unstructured.Unstructured) {
	h.t.Helper()
	if _, err := h.dyn.Resource(poolGVR).Namespace(ns).Update(h.t.Context(), p, metav1.UpdateOptions{}); err != nil {
		h.t.Fatalf("update pool: %v", err)
	}
}

func (h *harness) createPool(p *unstructured.Unstructured) {
	h.t.Helper()
	if _, err := h.dyn.Resource(poolGVR).Namespace(ns).Create(h.t.Context(), p, metav1.CreateOptions{}); err != nil {
		h.t.Fatalf("create pool: %v", err)
	}
}

func (h *harness) synced() {
	h.t.Helper()
	select {
	case <-h.w.Synced():
	case <-time.After(10 * time.Second):
		h.t.Fatalf("Synced not closed within 10s; logs:\n%s", h.logs)
	}
}

var selectorCfg = Config{PoolNamespace: ns, PoolGroup: DefaultPoolGroup, EndpointSelector: "app=vllm", EndpointTargetPorts: []int32{8000}}

func poolCfg(name string) Config {
	return Config{PoolNamespace: ns, PoolGroup: DefaultPoolGroup, PoolName: name}
}

func TestInitialEndpoints(t *testing.T) {
	tests := []struct {
		name  string
		ports []int32
		pods  []*corev1.Pod
		want  []string
	}{
		{"ready pods with an IP are endpoints, sorted", []int32{8000},
			[]*corev1.Pod{pod("b", "10.0.0.2"), pod("a", "10.0.0.1")}, []string{"10.0.0.1:8000", "10.0.0.2:8000"}},
		{"a pod that is not ready is left out", []int32{8000},
			[]*corev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.2", notReady)}, []string{"10.0.0.1:8000"}},
		{"a pod without a Ready condition is left out", []int32{8000},
			[]*corev1.Pod{pod("a", "10.0.0.1", noConditions)}, []string{}},
		{"a pod without an IP is left out", []int32{8000},
			[]*corev1.Pod{pod("a", "10.0.0.1"), pod("b", "", noIP)}, []string{"10.0.0.1:8000"}},
		{"a terminating pod is left out", []int32{8000},
			[]*corev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.2", terminating)}, []string{"10.0.0.1:8000"}},
		{"a pod with other labels is left out", []int32{8000},
			[]*corev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.2", withLabels("app", "other"))}, []string{"10.0.0.1:8000"}},
		{"a pod in another namespace is left out", []int32{8000},
			[]*corev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.2", inNamespace("other"))}, []string{"10.0.0.1:8000"}},
		{"each target port is an endpoint", []int32{8001, 8000},
			[]*corev1.Pod{pod("a", "10.0.0.1")}, []string{"10.0.0.1:8000", "10.0.0.1:8001"}},
		{"IPv6 addresses are bracketed", []int32{8000},
			[]*corev1.Pod{pod("a", "fd00::1")}, []string{"[fd00::1]:8000"}},
		{"host-network pods sharing an IP give one endpoint", []int32{8000},
			[]*corev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.1")}, []string{"10.0.0.1:8000"}},
		{"no pods: an empty list, still synced", []int32{8000}, nil, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := selectorCfg
			cfg.EndpointTargetPorts = tt.ports
			h := start(t, cfg, tt.pods)
			h.expect(tt.want...)
			h.synced()
		})
	}
}

func TestSelectorFollowsPods(t *testing.T) {
	h := start(t, selectorCfg, []*corev1.Pod{pod("a", "10.0.0.1"), pod("b", "10.0.0.2", notReady)})
	h.expect("10.0.0.1:8000")

	h.update(pod("b", "10.0.0.2"))
	h.expect("10.0.0.1:8000", "10.0.0.2:8000")

	h.update(pod("a", "10.0.0.1", notReady))
	h.expect("10.0.0.2:8000")

	h.update(pod("b", "10.0.0.9"))
	h.expect("10.0.0.9:8000")

	h.create(pod("c", "10.0.0.3"))
	h.expect("10.0.0.3:8000", "10.0.0.9:8000")

	h.update(pod("c", "10.0.0.3", terminating))
	h.expect("10.0.0.9:8000")

	h.delete("b")
	h.expect()

	if !strings.Contains(h.logs.String(), "removed=[10.0.0.9:8000]") {
		t.Errorf("logs do not name the removed endpoint:\n%s", h.logs)
	}
}

func TestUnrelatedChangesDoNotNotify(t *testing.T) {
	h := start(t, selectorCfg, []*corev1.Pod{pod("a", "10.0.0.1")})
	h.expect("10.0.0.1:8000")
	// A change to a pod outside the selector, then one that matters: the
	// first update seen must be the second change.
	h.create(pod("x", "10.0.0.7", withLabels("app", "other")))
	h.update(pod("a", "10.0.0.1", withLabels("app", "vllm", "rev", "2")))
	h.create(pod("b", "10.0.0.2"))
	h.expect("10.0.0.1:8000", "10.0.0.2:8000")
}

func TestPoolFollowsSelectorAndPorts(t *testing.T) {
	pods := []*corev1.Pod{
		pod("a", "10.0.0.1"),
		pod("b", "10.0.0.2", withLabels("app", "vllm", "model", "qwen")),
		pod("c", "10.0.0.3", withLabels("model", "llama")),
	}
	other := pool("other", map[string]any{"model": "llama"}, 9000)
	h := start(t, poolCfg("vllm"), pods, pool("vllm", map[string]any{"app": "vllm"}, 8000), other)
	h.expect("10.0.0.1:8000", "10.0.0.2:8000")
	h.synced()

	h.updatePool(pool("vllm", map[string]any{"app": "vllm", "model": "qwen"}, 8000))
	h.expect("10.0.0.2:8000")

	h.updatePool(pool("vllm", map[string]any{"model": "llama"}, 8000, 8001))
	h.expect("10.0.0.3:8000", "10.0.0.3:8001")

	h.update(pod("c", "10.0.0.4", withLabels("model", "llama")))
	h.expect("10.0.0.4:8000", "10.0.0.4:8001")

	if err := h.dyn.Resource(poolGVR).Namespace(ns).Delete(t.Context(), "vllm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.expect()
	if !strings.Contains(h.logs.String(), "not found") {
		t.Errorf("pool deletion not logged:\n%s", h.logs)
	}
}

func TestPoolMissingKeepsUnsynced(t *testing.T) {
	h := start(t, poolCfg("vllm"), []*corev1.Pod{pod("a", "10.0.0.1")}, pool("other", map[string]any{"app": "vllm"}, 8000))
	// Once the watcher has logged the missing pool its caches have synced;
	// readiness must still be withheld.
	h.logs.waitFor(t, "inferencepool llm/vllm (group inference.networking.k8s.io) not found")
	select {
	case <-h.w.Synced():
		t.Fatal("Synced closed while the pool does not exist")
	case eps := <-h.updates:
		t.Fatalf("onChange(%q) called while the pool does not exist", eps)
	default:
	}
	h.createPool(pool("vllm", map[string]any{"app": "vllm"}, 8000))
	h.expect("10.0.0.1:8000")
	h.synced()
}

func TestInvalidPoolGivesNoEndpoints(t *testing.T) {
	tests := []struct {
		name    string
		pool    *unstructured.Unstructured
		wantLog string
	}{
		{"no selector", pool("vllm", nil, 8000), "spec.selector.matchLabels is empty"},
		{"no target ports", pool("vllm", map[string]any{"app": "vllm"}), "spec.targetPorts has 0 entries"},
		{"nine target ports", pool("vllm", map[string]any{"app": "vllm"}, 1, 2, 3, 4, 5, 6, 7, 8, 9), "spec.targetPorts has 9 entries"},
		{"port out of range", pool("vllm", map[string]any{"app": "vllm"}, 70000), "port 70000 is not from 1 to 65535"},
		{"duplicate port", pool("vllm", map[string]any{"app": "vllm"}, 8000, 8000), "port 8000 is listed twice"},
		{"bad label value", pool("vllm", map[string]any{"app": "a b"}, 8000), "spec.selector.matchLabels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := pool("vllm", map[string]any{"app": "vllm"}, 8000)
			h := start(t, poolCfg("vllm"), []*corev1.Pod{pod("a", "10.0.0.1")}, good)
			h.expect("10.0.0.1:8000")
			h.updatePool(tt.pool)
			h.expect()
			if !strings.Contains(h.logs.String(), tt.wantLog) {
				t.Errorf("logs lack %q:\n%s", tt.wantLog, h.logs)
			}
			h.updatePool(good)
			h.expect("10.0.0.1:8000")
		})
	}
}

func TestRunTwice(t *testing.T) {
	h := start(t, selectorCfg, nil)
	h.expect()
	if err := h.w.Run(t.Context(), func([]string) {}); err == nil {
		t.Fatal("second Run returned nil, want an error")
	}
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	h := start(t, selectorCfg, []*corev1.Pod{pod("a", "10.0.0.1")})
	h.expect("10.0.0.1:8000")
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			t.Fatalf("Run = %v, want nil", err)
		}
		h.done <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

func TestNewWatcherRejects(t *testing.T) {
	client := fake.NewClientset()
	tests := []struct {
		name string
		cfg  Config
		dyn  bool
		want string
	}{
		{"no discovery", Config{PoolNamespace: ns}, true, "no discovery configured"},
		{"pool without dynamic client", poolCfg("vllm"), false, "needs a dynamic client"},
		{"invalid config", Config{PoolNamespace: ns, EndpointSelector: "app=vllm"}, true, "needs --endpoint-target-ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.dyn {
				_, err = NewWatcher(tt.cfg, client, dynamicfake.NewSimpleDynamicClient(runtime.NewScheme()), nil)
			} else {
				_, err = NewWatcher(tt.cfg, client, nil, nil)
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewWatcher error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// BenchmarkConvergence measures the time from a pod change written to the
// (fake) API server to the onChange call that reflects it.
func BenchmarkConvergence(b *testing.B) {
	client := fake.NewClientset(pod("a", "10.0.0.1"))
	w, err := NewWatcher(selectorCfg, client, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	updates := make(chan []string, 1)
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(eps []string) { updates <- eps }) }()
	<-updates
	ready := true
	b.ResetTimer()
	for b.Loop() {
		ready = !ready
		p := pod("a", "10.0.0.1")
		if !ready {
			notReady(p)
		}
		if _, err := client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		<-updates
	}
	b.StopTimer()
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}
