package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// hopByHop are the connection-specific headers a proxy neither forwards nor shows the picker.
var hopByHop = map[string]bool{
	"connection":          true,
	"keep-alive":          true,
	"proxy-connection":    true,
	"proxy-authenticate":  true,
	"proxy-authorization": true,
	"te":                  true,
	"trailer":             true,
	"transfer-encoding":   true,
	"upgrade":             true,
}

// message is one side of an HTTP exchange as ext_proc sees it: the pseudo-headers that matter to
// the gateway and the regular headers.
type message struct {
	method, path, authority, scheme string // request pseudo-headers
	status                          int    // response :status
	header                          http.Header
}

// headerMap renders m as Envoy sends it: pseudo-headers first, then regular headers with
// lower-case names in sorted order, one entry per value, values in raw_value.
func (m *message) headerMap(response bool) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	add := func(k, v string) {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	if response {
		add(":status", strconv.Itoa(m.status))
	} else {
		add(":authority", m.authority)
		add(":path", m.path)
		add(":method", m.method)
		add(":scheme", m.scheme)
	}
	for _, k := range slices.Sorted(maps.Keys(m.header)) {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range m.header[k] {
			add(lk, v)
		}
	}
	return hm
}

// apply applies an ext_proc header mutation with Envoy's semantics: removals first, then sets by
// append_action, where the default value (APPEND_IF_EXISTS_OR_ADD, the proto zero) overwrites,
// as Envoy's ext_proc filter does when the deprecated append flag is absent (it is ignored here).
// :path, :authority (and host) and :status may be set; other pseudo-headers are left alone.
func (m *message) apply(mut *extprocv3.HeaderMutation) error {
	if mut == nil {
		return nil
	}
	for _, k := range mut.GetRemoveHeaders() {
		if !strings.HasPrefix(k, ":") {
			m.header.Del(k)
		}
	}
	for _, o := range mut.GetSetHeaders() {
		h := o.GetHeader()
		if h == nil {
			continue
		}
		if h.GetValue() != "" && len(h.GetRawValue()) > 0 {
			return fmt.Errorf("header mutation of %q sets both value and raw_value: set only raw_value", h.GetKey())
		}
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		k := strings.ToLower(h.GetKey())
		if k == "" || strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("header mutation has an invalid header %q: %q", h.GetKey(), v)
		}
		var set bool
		switch o.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD, corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			set = true
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			set = !m.has(k)
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			set = m.has(k)
		default:
			return fmt.Errorf("header mutation of %q has an unknown append_action %v", k, o.GetAppendAction())
		}
		if set {
			if err := m.set(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *message) has(k string) bool {
	switch k {
	case ":path", ":authority", "host", ":status":
		return true
	}
	return len(m.header.Values(k)) > 0
}

func (m *message) set(k, v string) error {
	switch k {
	case ":path":
		m.path = v
	case ":authority", "host":
		m.authority = v
	case ":status":
		s, err := strconv.Atoi(v)
		if err != nil || s < 200 || s > 599 {
			return fmt.Errorf("header mutation sets :status to %q: use a code from 200 to 599", v)
		}
		m.status = s
	default:
		if strings.HasPrefix(k, ":") {
			return nil
		}
		m.header.Set(k, v)
	}
	return nil
}

// destinations returns the ordered endpoint list from a header value "a:1,b:2" (spaces allowed
// around entries; empty entries dropped).
func destinations(v string) []string {
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// lbMetadata returns the destination the picker put in dynamic metadata envoy.lb, if any.
func lbMetadata(md *structpb.Struct) (string, bool) {
	ns := md.GetFields()["envoy.lb"].GetStructValue()
	v, ok := ns.GetFields()[DestinationHeader]
	if !ok {
		return "", false
	}
	return v.GetStringValue(), true
}

// subsetHint renders the GIE subset hint as Envoy forwards it in metadata_context.
func subsetHint(endpoints []string) *corev3.Metadata {
	vals := make([]*structpb.Value, len(endpoints))
	for i, e := range endpoints {
		vals[i] = structpb.NewStringValue(e)
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{
			DestinationHeader + "-subset": structpb.NewListValue(&structpb.ListValue{Values: vals}),
		}},
	}}
}
