// Package lora tells which LoRA adapters each engine is serving, from vLLM's
// vllm:lora_requests_info gauge, and what routing a request for an adapter to an engine
// costs it in adapter slots.
//
// vLLM's scheduler runs at most max_loras distinct adapters at once: a waiting request
// whose adapter is not among the running requests' is skipped while max_loras adapters
// run (vllm/v1/core/sched/scheduler.py, "Scheduling would exceed max_loras, skip"). So a
// request for an adapter an engine already runs starts as any other; on an engine with
// a free slot it pays the adapter's activation; on an engine whose slots are all taken it
// waits until one adapter's requests have all finished.
//
// The package does no I/O: the caller feeds it the gauge's series (Latest) and asks
// Table.State. It must not import picker or fleet.
package lora

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The gauge and its labels, as vLLM names them (vllm/v1/metrics/loggers.py).
const (
	Metric       = "vllm:lora_requests_info"
	LabelMax     = "max_lora"
	LabelRunning = "running_lora_adapters"
	LabelWaiting = "waiting_lora_adapters"
)

// Info is one engine's adapters as one series of the gauge names them.
type Info struct {
	MaxLoRA int      // adapters the engine can run at once (max_loras); 0: not known
	Running []string // adapters of running requests, sorted, without duplicates
	Waiting []string // adapters of waiting requests, sorted, without duplicates
}

// Series is one series of the gauge: its labels and its value, the time vLLM set it.
type Series struct {
	Labels map[string]string
	Value  float64
}

// ParseInfo reads one series' labels: max_lora an integer of at least 0, the adapter
// lists comma-separated names (spaces around a name are dropped, empty names skipped).
// A missing label reads as empty; a bad max_lora is an error naming the value.
func ParseInfo(labels map[string]string) (Info, error) {
	var in Info
	if s := strings.TrimSpace(labels[LabelMax]); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return Info{}, fmt.Errorf("lora: %s label %q is not a count of adapter slots: the engine's %s gauge is malformed", LabelMax, s, Metric)
		}
		in.MaxLoRA = n
	}
	in.Running = names(labels[LabelRunning])
	in.Waiting = names(labels[LabelWaiting])
	return in, nil
}

func names(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Latest is the Info of the series vLLM set last (the highest value: vLLM sets the gauge
// to the time, and a label set it no longer uses keeps its old time). It is false when
// no series parses.
func Latest(series []Series) (Info, bool) {
	var best Info
	bestAt, found := 0.0, false
	for _, s := range series {
		in, err := ParseInfo(s.Labels)
		if err != nil || (found && !(s.Value > bestAt)) {
			continue
		}
		best, bestAt, found = in, s.Value, true
	}
	return best, found
}

// State is what an engine's slots mean for a request for one adapter.
type State int8

// The states, from the cheapest.
const (
	Unknown   State = iota // no Info for the engine, or it does not report max_lora
	Active                 // the adapter is among the running or waiting requests'
	FreeSlot               // not active, and fewer than max_lora adapters run
	SlotsFull              // not active, and max_lora adapters run: the request waits for one to drain
)

func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case FreeSlot:
		return "free-slot"
	case SlotsFull:
		return "slots-full"
	}
	return "unknown"
}

// State is the state of adapter on an engine with in.
func (in Info) State(adapter string) State {
	if in.MaxLoRA <= 0 {
		return Unknown
	}
	if _, ok := slices.BinarySearch(in.Running, adapter); ok {
		return Active
	}
	if _, ok := slices.BinarySearch(in.Waiting, adapter); ok {
		return Active
	}
	if len(in.Running) < in.MaxLoRA {
		return FreeSlot
	}
	return SlotsFull
}

// Table is every engine's latest Info, by endpoint address. It is safe for concurrent
// use; the zero Table is empty and ready.
type Table struct {
	mu sync.RWMutex
	m  map[string]Info
}

// Set records endpoint's Info.
func (t *Table) Set(endpoint string, in Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]Info{}
	}
	t.m[endpoint] = in
}

// State is the state of adapter on endpoint (Unknown for an endpoint without Info).
func (t *Table) State(endpoint, adapter string) State {
	t.mu.RLock()
	in, ok := t.m[endpoint]
	t.mu.RUnlock()
	if !ok {
		return Unknown
	}
	return in.State(adapter)
}
