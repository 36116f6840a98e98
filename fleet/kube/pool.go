package kube

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// poolV1 mirrors the fields of InferencePool v1 that discovery reads.
type poolV1 struct {
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
	} `json:"spec"`
}

// target is what a pool (or the selector flags) asks the watcher to follow.
type target struct {
	selector labels.Selector
	ports    []int32
}

// maxTargetPorts is InferencePool v1's limit on spec.targetPorts.
const maxTargetPorts = 8

// parsePool reads the selector and target ports of an InferencePool v1,
// checking what the CRD's schema checks (the API server may predate it).
func parsePool(u *unstructured.Unstructured) (target, error) {
	var p poolV1
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err != nil {
		return target{}, fmt.Errorf("decode spec: %w", err)
	}
	ml := p.Spec.Selector.MatchLabels
	if len(ml) == 0 {
		return target{}, fmt.Errorf("spec.selector.matchLabels is empty: name the engine pods' labels")
	}
	sel, err := labels.ValidatedSelectorFromSet(ml)
	if err != nil {
		return target{}, fmt.Errorf("spec.selector.matchLabels: %w", err)
	}
	n := len(p.Spec.TargetPorts)
	if n == 0 || n > maxTargetPorts {
		return target{}, fmt.Errorf("spec.targetPorts has %d entries, want 1 to %d", n, maxTargetPorts)
	}
	ports := make([]int32, 0, n)
	seen := map[int32]bool{}
	for _, tp := range p.Spec.TargetPorts {
		if tp.Number < 1 || tp.Number > 65535 {
			return target{}, fmt.Errorf("spec.targetPorts: port %d is not from 1 to 65535", tp.Number)
		}
		if seen[tp.Number] {
			return target{}, fmt.Errorf("spec.targetPorts: port %d is listed twice", tp.Number)
		}
		seen[tp.Number] = true
		ports = append(ports, tp.Number)
	}
	return target{selector: sel, ports: ports}, nil
}

// describe renders a target for logs: "app=vllm ports 8000,8001".
func (t target) describe() string {
	p := portList(t.ports)
	return fmt.Sprintf("%s ports %s", t.selector, strings.TrimSpace(p.String()))
}
