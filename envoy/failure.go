package envoy

import (
	"errors"
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// routing is what checkRoutes found: the cluster taken by requests the picker did not
// route (failure_mode_allow), "" when there is none.
type routing struct {
	fallback string
}

// checkRoutes checks the routes of a listener that runs ext_proc. Routes that require
// DestinationHeader must end at an ORIGINAL_DST cluster keyed by it and must come before
// any route that does not (which would otherwise take the picker's requests). With
// failOpen, a request the picker did not route has no header: it must reach a route to a
// cluster that is not ORIGINAL_DST (ORIGINAL_DST without the header would connect back to
// the listener), and a header_mutation filter before ext_proc must remove a
// client-supplied DestinationHeader (or clients would choose engines while the picker is
// down).
func checkRoutes(hcm *hcmv3.HttpConnectionManager, clusters map[string]*clusterv3.Cluster, failOpen bool) (routing, error) {
	var out routing
	picked := 0
	for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			where := fmt.Sprintf("route %q", r.GetMatch().GetPrefix()+r.GetMatch().GetPath())
			c := clusters[r.GetRoute().GetCluster()]
			switch {
			case requiresDestination(r):
				if out.fallback != "" {
					return out, fmt.Errorf("%s (on %s) comes after the fallback route to %s, which takes every request first", where, DestinationHeader, out.fallback)
				}
				if err := checkDestination(r, c); err != nil {
					return out, fmt.Errorf("%s: %w", where, err)
				}
				picked++
			case c != nil && overrideHost(c) != nil:
				// override_host reads the picker's header and falls back to the
				// cluster's own balancing without it.
				if err := checkDestination(r, c); err != nil {
					return out, fmt.Errorf("%s: %w", where, err)
				}
				picked++
			case c != nil && c.GetType() == clusterv3.Cluster_ORIGINAL_DST:
				if failOpen {
					return out, fmt.Errorf("%s: with failure_mode_allow true, a request the picker did not route reaches ORIGINAL_DST cluster %s without %s and loops back to the gateway: match that route on the header (present_match) and add a fallback route", where, c.GetName(), DestinationHeader)
				}
				if err := checkOriginalDst(c); err != nil {
					return out, fmt.Errorf("%s: %w", where, err)
				}
				picked++
			case out.fallback == "":
				if c == nil {
					return out, fmt.Errorf("%s has no cluster", where)
				}
				out.fallback = c.GetName()
			}
		}
	}
	if picked == 0 {
		return out, errors.New("no route ends at an ORIGINAL_DST cluster keyed by " + DestinationHeader)
	}
	if !failOpen {
		return out, nil
	}
	if out.fallback == "" {
		return out, fmt.Errorf("failure_mode_allow is true but no route takes requests without %s: add a route to a cluster of the engines after the picker's route", DestinationHeader)
	}
	if !removesDestination(hcm) {
		return out, fmt.Errorf("failure_mode_allow is true but no header_mutation filter before ext_proc removes a client's %s: clients could choose an engine while the picker is down", DestinationHeader)
	}
	return out, nil
}

// requiresDestination reports whether r matches only requests that carry DestinationHeader.
func requiresDestination(r *routev3.Route) bool {
	for _, h := range r.GetMatch().GetHeaders() {
		if h.GetName() == DestinationHeader && h.GetPresentMatch() && !h.GetInvertMatch() {
			return true
		}
	}
	return false
}

// removesDestination reports whether a header_mutation filter before ext_proc removes
// DestinationHeader from the request.
func removesDestination(hcm *hcmv3.HttpConnectionManager) bool {
	for _, f := range hcm.GetHttpFilters() {
		tc := f.GetTypedConfig()
		switch tc.MessageName() {
		case "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor":
			return false
		case "envoy.extensions.filters.http.header_mutation.v3.HeaderMutation":
			var hm headermutationv3.HeaderMutation
			if f.GetDisabled() || tc.UnmarshalTo(&hm) != nil {
				continue
			}
			for _, m := range hm.GetMutations().GetRequestMutations() {
				if m.GetRemove() == DestinationHeader {
					return true
				}
			}
		}
	}
	return false
}

// clusterAddress is the first endpoint address of c, "host:port" ("" when it has none).
func clusterAddress(c *clusterv3.Cluster) string {
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			if sa := lb.GetEndpoint().GetAddress().GetSocketAddress(); sa != nil {
				return fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue())
			}
		}
	}
	return ""
}
