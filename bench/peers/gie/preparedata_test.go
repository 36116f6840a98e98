package gie

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	framework "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
)

// delayedPrefixType is a test plugin type: GIE's approximate prefix producer whose
// PrepareRequestData first sleeps for the requests its parameters name, as a goroutine does
// that the OS leaves unscheduled for that long on a loaded host.
const delayedPrefixType = "test-delayed-approx-prefix-producer"

// delayedPrefixParams are delayedPrefix's parameters: the delay and the request IDs it
// applies to.
type delayedPrefixParams struct {
	DelayMS int      `json:"delayMs"`
	IDs     []string `json:"ids"`
}

// delayedPrefix reports GIE's producer's type, so GIE's loader adds no producer of its own
// and the adapter awaits the index update through wg, as it awaits the producer's.
type delayedPrefix struct {
	name    string
	inner   fwkrc.PrepareDataPlugin
	innerWG *sync.WaitGroup
	delay   time.Duration
	ids     map[string]bool
	// finished receives the ID of each delayed request once its PrepareRequestData has
	// returned (after Pick, if GIE's Director stopped waiting for it).
	finished chan string
	wg       sync.WaitGroup
}

// delayedPrefixes holds the instances the factory made, by name, for the test to reach.
var delayedPrefixes sync.Map

func init() {
	registerPlugins()
	fwkplugin.Register(delayedPrefixType, func(name string, raw json.RawMessage, h fwkplugin.Handle) (fwkplugin.Plugin, error) {
		var params delayedPrefixParams
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, err
		}
		inner, err := approximateprefix.ApproxPrefixCacheFactory(name, nil, h)
		if err != nil {
			return nil, err
		}
		innerWG, err := pendingUpdates(inner)
		if err != nil {
			return nil, err
		}
		d := &delayedPrefix{
			name: name, inner: inner.(fwkrc.PrepareDataPlugin), innerWG: innerWG,
			delay: time.Duration(params.DelayMS) * time.Millisecond, ids: map[string]bool{},
			finished: make(chan string, len(params.IDs)),
		}
		for _, id := range params.IDs {
			d.ids[id] = true
		}
		delayedPrefixes.Store(name, d)
		return d, nil
	})
}

func (d *delayedPrefix) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: approximateprefix.ApproxPrefixCachePluginType, Name: d.name}
}
func (d *delayedPrefix) Produces() map[string]any { return d.inner.Produces() }
func (d *delayedPrefix) Consumes() map[string]any { return d.inner.Consumes() }

func (d *delayedPrefix) PrepareRequestData(ctx context.Context, req *framework.LLMRequest, eps []framework.Endpoint) error {
	if !d.ids[req.RequestId] {
		return d.inner.PrepareRequestData(ctx, req, eps)
	}
	time.Sleep(d.delay)
	err := d.inner.PrepareRequestData(ctx, req, eps)
	d.finished <- req.RequestId
	return err
}

func (d *delayedPrefix) PreRequest(ctx context.Context, req *framework.LLMRequest, res *framework.SchedulingResult) {
	d.inner.(fwkrc.PreRequest).PreRequest(ctx, req, res)
	d.wg.Go(d.innerWG.Wait)
}

// delayedConfig is GIE's default profile with the delayed producer in place of GIE's.
func delayedConfig(name string, delay time.Duration, ids ...string) string {
	params, _ := json.Marshal(delayedPrefixParams{DelayMS: int(delay / time.Millisecond), IDs: ids})
	return fmt.Sprintf(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- name: %s
  type: %s
  parameters: %s
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
  - pluginRef: max-score-picker
`, name, delayedPrefixType, params)
}

// TestPrepareDataIgnoresWallClock stalls the prefix producer of one request for longer
// than GIE's Director waits for prepare-data plugins (400 ms) and checks the adapter's
// decisions, scores and prefix matches are those of the same requests without the stall.
// The control runs GIE's timed step (TimedPrepareData): there the stalled request is
// scheduled without its prefix match and never enters the index, so the next request of the
// same prompt is scored differently too; this is what made the gie arm's tournament cells
// depend on the host's load (decision 1331).
func TestPrepareDataIgnoresWallClock(t *testing.T) {
	prompt := strings.Repeat("the same long system prompt ", 20)
	run := func(t *testing.T, name string, cfg Config) []Decision {
		cfg.Seed = 3
		p := newPicker(t, fleet3, cfg)
		v, _ := delayedPrefixes.Load(name)
		d := v.(*delayedPrefix)
		var out []Decision
		for i := range 4 {
			id := fmt.Sprintf("r%d", i)
			dec, err := p.Pick(CompletionRequest(id, "m", prompt+fmt.Sprint(i)), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d.ids[id] {
				<-d.finished // the stalled producer has returned: nothing runs behind the next Pick
			}
			out = append(out, dec)
		}
		return out
	}
	for i, tc := range []struct {
		name  string
		timed bool
		same  bool
	}{
		{"untimed", false, true},
		{"GIE's timed step (control)", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, stalled := fmt.Sprintf("unstalled-%d", i), fmt.Sprintf("stalled-%d", i)
			want := run(t, ref, Config{PickerConfig: delayedConfig(ref, 0), TimedPrepareData: tc.timed})
			got := run(t, stalled, Config{PickerConfig: delayedConfig(stalled, 600*time.Millisecond, "r1"), TimedPrepareData: tc.timed})
			if want[1].Ranking[0].PrefixMatchBlocks == 0 {
				t.Fatalf("reference: r1 found no prefix held (%+v): the test needs a repeated prompt", want[1].Ranking)
			}
			if same := reflect.DeepEqual(got, want); same != tc.same {
				t.Errorf("decisions with r1's producer stalled 600 ms equal to unstalled: %v, want %v\nstalled:   %+v\nunstalled: %+v", same, tc.same, got, want)
			}
		})
	}
}
