package gie

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	framework "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
)

// recordingPickerType is the plugin type under which this package's picker is registered
// in GIE's plugin registry; it stands where a profile names max-score-picker.
const recordingPickerType = "loadaware-bench-recording-picker"

// pickerParams are the recording picker's parameters in a GIE config.
type pickerParams struct {
	// Seed seeds the tie-break; ignored when TimeSeededTies is set.
	Seed uint64 `json:"seed"`
	// TimeSeededTies hands the choice to GIE's own max-score-picker.
	TimeSeededTies bool `json:"timeSeededTies"`
}

// recordingPicker is a GIE Picker that returns what max-score-picker (maxNumOfEndpoints 1)
// returns, the highest weighted score, and keeps the scored candidates of the last cycle.
//
// With TimeSeededTies it delegates to GIE's MaxScorePicker itself, which breaks ties by a
// shuffle from a generator seeded with the wall clock. Otherwise it applies the same rule
// (shuffle, then a stable sort by score, highest first, take the first) with the shuffle
// drawn from a generator seeded with Seed, after ordering the candidates by name so the
// shuffle's input does not depend on Go's map order: equal top scores are still spread
// at random, as upstream spreads them, and a run with the same seed repeats.
type recordingPicker struct {
	typedName fwkplugin.TypedName
	upstream  *picker.MaxScorePicker // nil unless TimeSeededTies

	mu   sync.Mutex
	rng  *rand.Rand
	last []Scored
}

var _ framework.Picker = (*recordingPicker)(nil)

// recordingPickerFactory is the registry factory for recordingPicker.
func recordingPickerFactory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var params pickerParams
	if raw != nil {
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, fmt.Errorf("%s %q: bad parameters %s: %w", recordingPickerType, name, raw, err)
		}
	}
	p := &recordingPicker{
		typedName: fwkplugin.TypedName{Type: recordingPickerType, Name: name},
		rng:       rand.New(rand.NewPCG(params.Seed, params.Seed^0x9e3779b97f4a7c15)),
	}
	if params.TimeSeededTies {
		p.upstream = picker.NewMaxScorePicker(picker.DefaultMaxNumOfEndpoints)
	}
	return p, nil
}

// TypedName returns the plugin's type and name.
func (p *recordingPicker) TypedName() fwkplugin.TypedName { return p.typedName }

// Pick returns the highest-scored candidate and records every candidate's score.
func (p *recordingPicker) Pick(ctx context.Context, cycle *framework.CycleState, scored []*framework.ScoredEndpoint) *framework.ProfileRunResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	var res *framework.ProfileRunResult
	if p.upstream != nil {
		// MaxScorePicker sorts the slice in place: afterwards it is in its own order.
		res = p.upstream.Pick(ctx, cycle, scored)
	} else {
		slices.SortFunc(scored, func(a, b *framework.ScoredEndpoint) int {
			return cmp.Compare(a.GetMetadata().NamespacedName.Name, b.GetMetadata().NamespacedName.Name)
		})
		p.rng.Shuffle(len(scored), func(i, j int) { scored[i], scored[j] = scored[j], scored[i] })
		slices.SortStableFunc(scored, func(a, b *framework.ScoredEndpoint) int { return cmp.Compare(b.Score, a.Score) })
		res = &framework.ProfileRunResult{}
		if len(scored) > 0 {
			res.TargetEndpoints = []framework.Endpoint{scored[0]}
		}
	}
	p.last = p.last[:0]
	for _, s := range scored {
		row := Scored{Endpoint: s.GetMetadata().NamespacedName.Name, Score: s.Score}
		if v, ok := s.Get(attrprefix.PrefixCacheMatchInfoKey); ok {
			if info, ok := v.(*attrprefix.PrefixCacheMatchInfo); ok {
				row.PrefixMatchBlocks = info.MatchBlocks()
				row.PrefixTotalBlocks = info.TotalBlocks()
			}
		}
		p.last = append(p.last, row)
	}
	return res
}

// takeLast returns the scored candidates of the last cycle and forgets them.
func (p *recordingPicker) takeLast() []Scored {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := slices.Clone(p.last)
	p.last = p.last[:0]
	return out
}
