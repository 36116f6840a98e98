// Package manifests holds the Kubernetes deployment files: the Helm chart
// (helm/loadaware-epp), the vLLM Production Stack toggle (vllm-stack) and the
// GIE and Istio examples (examples). It has no code; its tests render the
// chart in every mode with helm, decode every rendered and example object
// strictly into its Kubernetes type, and check how the objects refer to each
// other.
package manifests
