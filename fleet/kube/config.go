// Package kube discovers the vLLM endpoints of a fleet in Kubernetes.
//
// A Watcher follows either a Gateway API Inference Extension InferencePool
// (inference.networking.k8s.io/v1, named by --pool-name) and the pods its
// spec.selector matches, or a plain pod label selector (--endpoint-selector
// with --endpoint-target-ports) when the cluster has no InferencePool CRD.
// Both watch one namespace only. Every Ready pod with an IP that is not
// terminating yields one "ip:port" endpoint per target port.
//
// The package reports endpoint lists and nothing else: it does not import the
// rest of the project, keeps no load or cache state, and needs only get, list
// and watch on pods (and on inferencepools in pool mode).
package kube

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// DefaultPoolGroup is the API group of InferencePool v1.
const DefaultPoolGroup = "inference.networking.k8s.io"

// alphaPoolGroup is the group of the retired v1alpha2 InferencePool.
const alphaPoolGroup = "inference.networking.x-k8s.io"

// Mode says where the endpoint list comes from.
type Mode int

const (
	// ModeOff means no Kubernetes discovery: the caller uses a static list.
	ModeOff Mode = iota
	// ModePool follows an InferencePool and the pods its selector matches.
	ModePool
	// ModeSelector follows the pods matching a label selector.
	ModeSelector
)

// String names the mode as the logs and errors do.
func (m Mode) String() string {
	switch m {
	case ModePool:
		return "inferencepool"
	case ModeSelector:
		return "selector"
	default:
		return "off"
	}
}

// Config holds the discovery flags, named as GIE's endpoint picker names them.
type Config struct {
	// PoolName is the InferencePool to follow (--pool-name).
	PoolName string
	// PoolNamespace is the namespace of the pool or of the selected pods
	// (--pool-namespace, default $NAMESPACE, else "default").
	PoolNamespace string
	// PoolGroup is the InferencePool API group (--pool-group).
	PoolGroup string
	// EndpointSelector is a label selector for the engine pods, used without
	// an InferencePool (--endpoint-selector, e.g. "app=vllm").
	EndpointSelector string
	// EndpointTargetPorts are the engine ports used with EndpointSelector
	// (--endpoint-target-ports, e.g. "8000" or "8000,8001").
	EndpointTargetPorts []int32
}

// DefaultNamespace is the namespace used when --pool-namespace is not given:
// $NAMESPACE (which GIE's chart sets from the pod's namespace), else "default".
func DefaultNamespace() string {
	if ns := os.Getenv("NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

// RegisterFlags defines --pool-name, --pool-namespace, --pool-group,
// --endpoint-selector and --endpoint-target-ports on fs, storing into c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.PoolName, "pool-name", "", "InferencePool to watch for endpoints (GIE); empty = no pool")
	fs.StringVar(&c.PoolNamespace, "pool-namespace", DefaultNamespace(), "namespace of the InferencePool or of the --endpoint-selector pods; the default is env NAMESPACE when set")
	fs.StringVar(&c.PoolGroup, "pool-group", DefaultPoolGroup, "API group of the InferencePool (v1)")
	fs.StringVar(&c.EndpointSelector, "endpoint-selector", "", "label selector of the engine pods, used instead of an InferencePool, e.g. app=vllm")
	fs.Var((*portList)(&c.EndpointTargetPorts), "endpoint-target-ports", "comma-separated engine ports for --endpoint-selector, e.g. 8000")
}

// Mode reports which discovery the flags ask for (ModeOff when neither
// --pool-name nor --endpoint-selector is set).
func (c Config) Mode() Mode {
	switch {
	case c.PoolName != "":
		return ModePool
	case c.EndpointSelector != "":
		return ModeSelector
	default:
		return ModeOff
	}
}

// Validate reports the first inconsistency in the flags, phrased as what to
// change. A Config in ModeOff with no other field set is valid.
func (c Config) Validate() error {
	if c.PoolName != "" && c.EndpointSelector != "" {
		return errors.New("kube: both --pool-name and --endpoint-selector are set: pass one (the pool's selector, or a label selector without a pool)")
	}
	switch c.Mode() {
	case ModeOff:
		if len(c.EndpointTargetPorts) > 0 {
			return errors.New("kube: --endpoint-target-ports needs --endpoint-selector")
		}
		return nil
	case ModePool:
		if len(c.EndpointTargetPorts) > 0 {
			return errors.New("kube: --endpoint-target-ports applies only with --endpoint-selector; with --pool-name the pool's spec.targetPorts are used")
		}
		if errs := validation.IsDNS1123Subdomain(c.PoolName); len(errs) > 0 {
			return fmt.Errorf("kube: --pool-name %q is not a valid object name: %s", c.PoolName, strings.Join(errs, "; "))
		}
		if c.PoolGroup == alphaPoolGroup {
			return fmt.Errorf("kube: --pool-group %s (InferencePool v1alpha2) is not supported: move the pool to %s/v1", alphaPoolGroup, DefaultPoolGroup)
		}
		if errs := validation.IsDNS1123Subdomain(c.PoolGroup); len(errs) > 0 {
			return fmt.Errorf("kube: --pool-group %q is not a valid API group: %s", c.PoolGroup, strings.Join(errs, "; "))
		}
	case ModeSelector:
		sel, err := labels.Parse(c.EndpointSelector)
		if err != nil {
			return fmt.Errorf("kube: --endpoint-selector %q: %w", c.EndpointSelector, err)
		}
		if sel.Empty() {
			return fmt.Errorf("kube: --endpoint-selector %q selects every pod: name the engine pods' labels, e.g. app=vllm", c.EndpointSelector)
		}
		if len(c.EndpointTargetPorts) == 0 {
			return errors.New("kube: --endpoint-selector needs --endpoint-target-ports, e.g. 8000")
		}
	}
	if errs := validation.IsDNS1123Label(c.PoolNamespace); len(errs) > 0 {
		return fmt.Errorf("kube: --pool-namespace %q is not a valid namespace: %s", c.PoolNamespace, strings.Join(errs, "; "))
	}
	return nil
}

// portList is the flag.Value behind --endpoint-target-ports.
type portList []int32

func (p *portList) String() string {
	if p == nil {
		return ""
	}
	s := make([]string, len(*p))
	for i, n := range *p {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, ",")
}

func (p *portList) Set(v string) error {
	ports, err := ParsePorts(v)
	if err != nil {
		return err
	}
	*p = ports
	return nil
}

// ParsePorts parses a comma-separated list of distinct TCP ports such as
// "8000,8001". Spaces around entries are allowed; an empty list is an error.
func ParsePorts(v string) ([]int32, error) {
	var ports []int32
	seen := map[int32]bool{}
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("port %q is not a number from 1 to 65535", f)
		}
		if seen[int32(n)] {
			return nil, fmt.Errorf("port %d is listed twice", n)
		}
		seen[int32(n)] = true
		ports = append(ports, int32(n))
	}
	return ports, nil
}

// NewClientsFromEnv builds the typed and dynamic clients from the pod's
// service account when running in a cluster, else from $KUBECONFIG (or
// ~/.kube/config).
func NewClientsFromEnv() (kubernetes.Interface, dynamic.Interface, error) {
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, nil, fmt.Errorf("kube: not in a cluster and no usable kubeconfig (set KUBECONFIG): %w", err)
		}
	} else if err != nil {
		return nil, nil, fmt.Errorf("kube: in-cluster config: %w", err)
	}
	cfg.UserAgent = "loadaware-epp"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kube: client for %s: %w", cfg.Host, err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kube: dynamic client for %s: %w", cfg.Host, err)
	}
	return client, dyn, nil
}
