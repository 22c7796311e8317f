package cluster

import (
	"fmt"
	"strings"
)

// Env returns the shell exports that point etcdctl at the cluster.
func (c *Cluster) Env() string {
	var b strings.Builder
	for _, kv := range c.EtcdctlEnv() {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "export %s=%s\n", k, v)
	}
	return b.String()
}

// EtcdctlEnv is the ETCDCTL_* variables (KEY=VALUE) that point etcdctl at
// the cluster: its endpoints and, with TLS on, the CA and the client
// certificate and key files (paths, never a secret's value).
func (c *Cluster) EtcdctlEnv() []string {
	env := []string{"ETCDCTL_ENDPOINTS=" + strings.Join(c.Spec.ClientURLs(), ",")}
	if !c.Spec.TLS.Disabled {
		ca, cert, key := c.clientFiles()
		env = append(env, "ETCDCTL_CACERT="+ca, "ETCDCTL_CERT="+cert, "ETCDCTL_KEY="+key)
	}
	return env
}
