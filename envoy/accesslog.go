package envoy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	filev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Dynamic metadata the picker sets beside the destination (extproc's names).
const (
	ScoresKey         = "x-gateway-destination-endpoint-scores" // in envoy.lb
	DecisionNamespace = "loadaware.decision"                    // keys policy, reason, ranked
)

// DecisionFields are the dynamic-metadata values CheckDecisionLog requires in the access
// log, as "namespace:key".
var DecisionFields = []string{"envoy.lb:" + ScoresKey, DecisionNamespace + ":reason", DecisionNamespace + ":ranked"}

// commandOperators are the access-log command operators the shipped formats may use.
var commandOperators = []string{"START_TIME", "REQ", "RESP", "UPSTREAM_HOST", "RESPONSE_CODE", "RESPONSE_FLAGS",
	"DURATION", "BYTES_SENT", "BYTES_RECEIVED", "DYNAMIC_METADATA", "PROTOCOL", "UPSTREAM_CLUSTER", "DOWNSTREAM_REMOTE_ADDRESS"}

var operator = regexp.MustCompile(`%([A-Z_]+)(\(([^)]*)\))?(:[0-9]+)?%`)

// CheckDecisionLog verifies that the listener running ext_proc logs the picker's decision:
// a file access log whose format names every DecisionFields value, with only known
// command operators, and DYNAMIC_METADATA of namespaces the ext_proc filter receives
// (Envoy drops the others).
func CheckDecisionLog(b *bootstrapv3.Bootstrap) error {
	p, err := CheckPicker(b)
	if err != nil {
		return err
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		if l.GetName() != p.Listener {
			continue
		}
		hcm, err := connectionManager(l)
		if err != nil {
			return err
		}
		ep, err := extProc(hcm)
		if err != nil {
			return err
		}
		receiving := ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped()
		var logged []string
		for _, al := range hcm.GetAccessLog() {
			got, err := logFields(al, receiving)
			if err != nil {
				return fmt.Errorf("envoy: listener %s access log %s: %w", l.GetName(), al.GetName(), err)
			}
			logged = append(logged, got...)
		}
		var missing []string
		for _, f := range DecisionFields {
			if !slices.Contains(logged, f) {
				missing = append(missing, "%DYNAMIC_METADATA("+f+")%")
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("envoy: listener %s does not log the picker's decision: add %s to its access log format", l.GetName(), strings.Join(missing, ", "))
		}
		return nil
	}
	return fmt.Errorf("envoy: listener %s not found", p.Listener)
}

// logFields checks one access log's format and returns the "namespace:key" of every
// DYNAMIC_METADATA it names.
func logFields(al *accesslogv3.AccessLog, receiving []string) ([]string, error) {
	tc := al.GetTypedConfig()
	if tc.MessageName() != "envoy.extensions.access_loggers.file.v3.FileAccessLog" {
		return nil, nil
	}
	var fl filev3.FileAccessLog
	if err := tc.UnmarshalTo(&fl); err != nil {
		return nil, err
	}
	// log_format only: the older format and json_format fields are deprecated.
	lf := fl.GetLogFormat()
	formats := append(structStrings(lf.GetJsonFormat()), lf.GetTextFormatSource().GetInlineString())
	var out []string
	for _, f := range formats {
		for _, m := range operator.FindAllStringSubmatch(f, -1) {
			op, arg := m[1], m[3]
			if !slices.Contains(commandOperators, op) {
				return nil, fmt.Errorf("unknown command operator %%%s%% (known: %s)", op, strings.Join(commandOperators, ", "))
			}
			if op != "DYNAMIC_METADATA" {
				continue
			}
			parts := strings.Split(arg, ":")
			if len(parts) < 2 || slices.Contains(parts, "") {
				return nil, fmt.Errorf("%s: DYNAMIC_METADATA needs NAMESPACE:KEY", m[0])
			}
			if !slices.Contains(receiving, parts[0]) {
				return nil, fmt.Errorf("%s: ext_proc metadata_options.receiving_namespaces lacks %s, so Envoy drops it", m[0], parts[0])
			}
			out = append(out, parts[0]+":"+parts[1])
		}
	}
	return out, nil
}

// structStrings returns every string value inside s.
func structStrings(s *structpb.Struct) []string {
	var out []string
	for _, v := range s.GetFields() {
		switch k := v.GetKind().(type) {
		case *structpb.Value_StringValue:
			out = append(out, k.StringValue)
		case *structpb.Value_StructValue:
			out = append(out, structStrings(k.StructValue)...)
		}
	}
	return out
}
