package localkube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Client is a clientset for the admin's kubeconfig.
func (c *Cluster) Client() (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 10 * time.Second
	return kubernetes.NewForConfig(cfg)
}

// waitReady waits for the API server's /readyz and every node Ready; it
// calls apiReady (if not nil) once the API server is ready.
func (c *Cluster) waitReady(ctx context.Context, apiReady func()) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	if err := poll(ctx, 3*time.Minute, func() error {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("API server %s: %w (logs: %s)", c.APIServer, err, filepath.Join(c.Dir, "nodes", "*", "root", "var", "upper", "log", "pods"))
	}
	if apiReady != nil {
		apiReady()
	}
	return poll(ctx, 3*time.Minute, func() error {
		nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ready := map[string]bool{}
		for _, n := range nodes.Items {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready[n.Name] = true
				}
			}
		}
		var errs []error
		for _, n := range c.Nodes {
			if !ready[n.Name] {
				errs = append(errs, fmt.Errorf("node %s is not Ready (log: %s)", n.Name, filepath.Join(n.Dir, "logs", "kubelet.log")))
			}
		}
		return errors.Join(errs...)
	})
}

// addOns marks the control-plane nodes as kubeadm does (the label only:
// every node is one, and pods run on them all, so no taint) and waits for
// the default namespace's service account, which every pod needs.
func (c *Cluster) addOns(ctx context.Context) error {
	cs, err := c.Client()
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{
		"node-role.kubernetes.io/control-plane":                   "",
		"node.kubernetes.io/exclude-from-external-load-balancers": "",
	}}})
	for _, n := range c.Nodes {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("label node %s: %w", n.Name, err)
		}
	}
	if err := c.storage(ctx, cs); err != nil {
		return err
	}
	return poll(ctx, time.Minute, func() error {
		_, err := cs.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	})
}
