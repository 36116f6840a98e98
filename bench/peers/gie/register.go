package gie

import (
	"sync"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/fairness"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/ordering"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/concurrency"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/usagelimits"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/profile"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/loraaffinity"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/runningrequests"
)

var registerOnce sync.Once

// registerPlugins fills GIE's global plugin registry, as GIE's runner does at start-up
// (cmd/epp/runner/runner.go, registerInTreePlugins), with the in-tree plugins a
// scheduling-only EPP can name: the scorers, pickers and profile handler, the
// approximate-prefix data producer, the OpenAI parser, the metrics data source and
// extractor, the saturation detectors and the flow-control policies the loader's system
// defaults instantiate. Left out: the latency-predictor, SLO and conformance-test plugins
// (they need sidecars or test fixtures), the vLLM gRPC and passthrough parsers and the
// Kubernetes notification sources. It also registers this package's picker.
func registerPlugins() {
	registerOnce.Do(func() {
		fwkplugin.Register(prefix.PrefixCacheScorerPluginType, prefix.PrefixCachePluginFactory)
		fwkplugin.Register(picker.MaxScorePickerType, picker.MaxScorePickerFactory)
		fwkplugin.Register(picker.RandomPickerType, picker.RandomPickerFactory)
		fwkplugin.Register(picker.WeightedRandomPickerType, picker.WeightedRandomPickerFactory)
		fwkplugin.Register(profile.SingleProfileHandlerType, profile.SingleProfileHandlerFactory)
		fwkplugin.Register(kvcacheutilization.KvCacheUtilizationScorerType, kvcacheutilization.KvCacheUtilizationScorerFactory)
		fwkplugin.Register(queuedepth.QueueScorerType, queuedepth.QueueScorerFactory)
		fwkplugin.Register(runningrequests.RunningRequestsSizeScorerType, runningrequests.RunningRequestsSizeScorerFactory)
		fwkplugin.Register(loraaffinity.LoraAffinityScorerType, loraaffinity.LoraAffinityScorerFactory)
		fwkplugin.Register(fairness.GlobalStrictFairnessPolicyType, fairness.GlobalStrictFairnessPolicyFactory)
		fwkplugin.Register(fairness.RoundRobinFairnessPolicyType, fairness.RoundRobinFairnessPolicyFactory)
		fwkplugin.Register(ordering.FCFSOrderingPolicyType, ordering.FCFSOrderingPolicyFactory)
		fwkplugin.Register(ordering.EDFOrderingPolicyType, ordering.EDFOrderingPolicyFactory)
		fwkplugin.Register(usagelimits.StaticUsageLimitPolicyType, usagelimits.StaticPolicyFactory)
		fwkplugin.Register(approximateprefix.ApproxPrefixCachePluginType, approximateprefix.ApproxPrefixCacheFactory)
		fwkplugin.Register(sourcemetrics.MetricsDataSourceType, sourcemetrics.MetricsDataSourceFactory)
		fwkplugin.Register(extractormetrics.MetricsExtractorType, extractormetrics.CoreMetricsExtractorFactory)
		fwkplugin.Register(openai.OpenAIParserType, openai.OpenAIParserPluginFactory)
		fwkplugin.Register(concurrency.ConcurrencyDetectorType, concurrency.ConcurrencyDetectorFactory)
		fwkplugin.Register(utilization.UtilizationDetectorType, utilization.UtilizationDetectorFactory)
		fwkplugin.Register(recordingPickerType, recordingPickerFactory)
	})
}
