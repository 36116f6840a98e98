package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watcher follows the endpoints of one pool or label selector. Create it with
// NewWatcher and call Run once.
type Watcher struct {
	cfg     Config
	client  kubernetes.Interface
	dyn     dynamic.Interface
	log     *slog.Logger
	fixed   target // ModeSelector: the flags' selector and ports
	synced  chan struct{}
	started atomic.Bool
}

// NewWatcher checks cfg and returns a Watcher for it. cfg must be in
// ModePool (dyn is then required) or ModeSelector (dyn may be nil).
func NewWatcher(cfg Config, client kubernetes.Interface, dyn dynamic.Interface, logger *slog.Logger) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{cfg: cfg, client: client, dyn: dyn, synced: make(chan struct{}),
		log: logger.With("component", "kube-discovery", "mode", cfg.Mode().String(), "namespace", cfg.PoolNamespace)}
	switch cfg.Mode() {
	case ModeOff:
		return nil, errors.New("kube: no discovery configured: pass --pool-name or --endpoint-selector")
	case ModePool:
		if dyn == nil {
			return nil, errors.New("kube: --pool-name needs a dynamic client to watch InferencePools")
		}
		w.log = w.log.With("pool", cfg.PoolName)
	case ModeSelector:
		sel, err := labels.Parse(cfg.EndpointSelector)
		if err != nil {
			return nil, fmt.Errorf("kube: --endpoint-selector %q: %w", cfg.EndpointSelector, err)
		}
		w.fixed = target{selector: sel, ports: slices.Clone(cfg.EndpointTargetPorts)}
	}
	if client == nil {
		return nil, errors.New("kube: a Kubernetes client is required to watch pods")
	}
	return w, nil
}

// Synced is closed once the informers have listed their objects and, in pool
// mode, the pool has been found with a valid spec; the first onChange call
// happens just before. Readiness should wait for it. It stays closed even if
// the pool is later deleted (the endpoint list then becomes empty).
func (w *Watcher) Synced() <-chan struct{} { return w.synced }

// Run watches until ctx ends and returns nil then, or an error if it is
// called twice. onChange receives the sorted, deduplicated "ip:port" list
// (IPv6 as "[ip]:port") first when Synced closes and then after every change;
// the calls come from Run's goroutine one at a time, the slice is the
// callee's, and an empty list means no endpoint is ready.
func (w *Watcher) Run(ctx context.Context, onChange func(endpoints []string)) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("kube: Watcher.Run called twice: create a new Watcher")
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()

	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}

	ns := w.cfg.PoolNamespace
	podTweak := func(o *metav1.ListOptions) {}
	if w.cfg.Mode() == ModeSelector {
		podTweak = func(o *metav1.ListOptions) { o.LabelSelector = w.fixed.selector.String() }
	}
	pods := coreinformers.NewFilteredPodInformer(w.client, ns, 0, cache.Indexers{}, podTweak)
	informers := []cache.SharedIndexInformer{pods}
	if err := pods.SetTransform(trimPod); err != nil {
		return fmt.Errorf("kube: pod informer: %w", err)
	}
	var pools cache.SharedIndexInformer
	if w.cfg.Mode() == ModePool {
		gvr := schema.GroupVersionResource{Group: w.cfg.PoolGroup, Version: "v1", Resource: "inferencepools"}
		byName := func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.cfg.PoolName).String()
		}
		pools = dynamicinformer.NewFilteredDynamicInformer(w.dyn, gvr, ns, 0, cache.Indexers{}, byName).Informer()
		informers = append(informers, pools)
	}
	for _, inf := range informers {
		if err := inf.SetWatchErrorHandlerWithContext(w.watchError); err != nil {
			return fmt.Errorf("kube: informer: %w", err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("kube: informer: %w", err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
	}

	hasSynced := make([]cache.InformerSynced, len(informers))
	for i, inf := range informers {
		hasSynced[i] = inf.HasSynced
	}
	if !cache.WaitForCacheSync(ctx.Done(), hasSynced...) {
		return nil
	}
	w.log.Info("kubernetes caches synced")

	var (
		last      []string
		delivered bool
		state     string // the problem or the target last logged
	)
	for {
		tgt, err := w.target(pools)
		if err != nil {
			if msg := err.Error(); msg != state {
				w.log.Warn("no endpoints from the pool", "err", msg)
				state = msg
			}
			tgt = target{}
		} else if d := tgt.describe(); d != state {
			w.log.Info("following pods", "selector", d)
			state = d
		}
		// Before the first delivery a pool problem keeps Synced open;
		// afterwards it empties the list.
		if err == nil || delivered {
			eps := endpoints(pods.GetStore(), tgt)
			if !delivered || !slices.Equal(eps, last) {
				w.logChange(last, eps)
				onChange(slices.Clone(eps))
				last = eps
			}
			if !delivered {
				delivered = true
				close(w.synced)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		}
	}
}

// target returns what to follow now: the flags' selector, or the pool's.
func (w *Watcher) target(pools cache.SharedIndexInformer) (target, error) {
	if pools == nil {
		return w.fixed, nil
	}
	obj, ok, err := pools.GetStore().GetByKey(w.cfg.PoolNamespace + "/" + w.cfg.PoolName)
	if err != nil {
		return target{}, fmt.Errorf("read inferencepool %s/%s from cache: %w", w.cfg.PoolNamespace, w.cfg.PoolName, err)
	}
	if !ok {
		return target{}, fmt.Errorf("inferencepool %s/%s (group %s) not found: create it, or fix --pool-name/--pool-namespace",
			w.cfg.PoolNamespace, w.cfg.PoolName, w.cfg.PoolGroup)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return target{}, fmt.Errorf("inferencepool cache holds a %T", obj)
	}
	tgt, err := parsePool(u)
	if err != nil {
		return target{}, fmt.Errorf("inferencepool %s/%s: %w", w.cfg.PoolNamespace, w.cfg.PoolName, err)
	}
	return tgt, nil
}

// endpoints lists "ip:port" for every serving pod in store that tgt selects.
// A zero target selects nothing.
func endpoints(store cache.Store, tgt target) []string {
	if tgt.selector == nil {
		return []string{}
	}
	out := []string{}
	for _, obj := range store.List() {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !serving(pod) || !tgt.selector.Matches(labels.Set(pod.Labels)) {
			continue
		}
		for _, port := range tgt.ports {
			out = append(out, net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// serving reports whether a pod takes traffic: Ready, with an IP, not terminating.
func serving(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Status.PodIP == "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// trimPod keeps only the fields discovery reads, so a namespace with many
// pods costs little memory.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	t := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		Labels: pod.Labels, DeletionTimestamp: pod.DeletionTimestamp,
	}}
	t.Status.PodIP = pod.Status.PodIP
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			t.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return t, nil
}

// logChange logs which endpoints appeared and which vanished.
func (w *Watcher) logChange(before, after []string) {
	var added, removed []string
	for _, e := range after {
		if _, found := slices.BinarySearch(before, e); !found {
			added = append(added, e)
		}
	}
	for _, e := range before {
		if _, found := slices.BinarySearch(after, e); !found {
			removed = append(removed, e)
		}
	}
	w.log.Info("endpoints changed", "count", len(after), "added", added, "removed", removed)
}

// watchError logs list/watch failures (RBAC, a missing CRD) where operators
// look, instead of only through klog.
func (w *Watcher) watchError(_ context.Context, r *cache.Reflector, err error) {
	w.log.Error("kubernetes list/watch failed; retrying (check RBAC: get/list/watch on pods and inferencepools, and that the InferencePool CRD is installed)",
		"watch", r.TypeDescription(), "err", err)
}
