package memberlease

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// NewClient returns a client of the API server: from the kubeconfig file
// when one is given (tests, an agent outside a pod), else the pod's own
// service account (rest.InClusterConfig).
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("no kubeconfig given, and not in a pod: %w", err)
	}
	cfg.UserAgent = "steward-agent"
	return kubernetes.NewForConfig(cfg)
}
