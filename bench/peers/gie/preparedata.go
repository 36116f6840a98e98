package gie

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	framework "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// syncPrepareDataType is the type name of the adapter's synchronous prepare-data step.
const syncPrepareDataType = "loadaware-bench-sync-prepare-data"

// syncPrepareData runs the configured prepare-data plugins (the approximate prefix
// producer in GIE's default) on the Director's own goroutine, in GIE's dependency order,
// as the first admission step. GIE's Director runs the same plugins, in the same order, one
// step earlier, on a goroutine it abandons after 400 ms of wall-clock time
// (requestcontrol.prepareDataTimeout): on a loaded host the request is then scheduled
// without the prefix match and left out of the prefix index, so a run's decisions depend on
// the host's load (decision 1331). Here nothing is timed: the step ends when the plugins
// do. The rest is GIE's: the same request, the same candidate endpoints (the ones the
// scheduler then scores), stop at the first plugin error, log it and schedule anyway.
type syncPrepareData struct {
	plugins []fwkrc.PrepareDataPlugin
}

var _ fwkrc.AdmissionPlugin = (*syncPrepareData)(nil)

// TypedName returns the step's type and name.
func (s *syncPrepareData) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: syncPrepareDataType, Name: syncPrepareDataType}
}

// AdmitRequest runs the prepare-data plugins and admits the request whatever they return.
func (s *syncPrepareData) AdmitRequest(ctx context.Context, request *framework.LLMRequest, endpoints []framework.Endpoint) error {
	for _, pl := range s.plugins {
		if err := pl.PrepareRequestData(ctx, request, endpoints); err != nil {
			log.FromContext(ctx).Error(fmt.Errorf("prepare data plugin %s failed: %w", pl.TypedName(), err), "failed to prepare per request data")
			break
		}
	}
	return nil
}

// orderedPrepareData returns plugins' prepare-data plugins in order (GIE's dependency
// order, as datalayer.ValidateAndOrderDataDependencies returns it: TypedName strings).
func orderedPrepareData(plugins []fwkplugin.Plugin, order []string) []fwkrc.PrepareDataPlugin {
	byName := map[string]fwkrc.PrepareDataPlugin{}
	for _, pl := range plugins {
		if pd, ok := pl.(fwkrc.PrepareDataPlugin); ok {
			byName[pl.TypedName().String()] = pd
		}
	}
	var out []fwkrc.PrepareDataPlugin
	for _, name := range order {
		if pd, ok := byName[name]; ok {
			out = append(out, pd)
		}
	}
	return out
}
