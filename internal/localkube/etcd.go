package localkube

// etcd beneath the cluster: a Steward cluster of one member per
// control-plane node (kubeadm's stacked topology), set up as
// docs/hosts.md says: `steward init --host NODE=IP ...` on the coordinator
// (DIR/steward, in the root namespace), each node's agent joined with its
// join file in the node's network namespace (DIR/nodes/NODE/steward), then
// `steward up` on the coordinator. kube-apiserver reaches etcd with a client
// certificate from `steward certs issue-client`, placed where kubeadm's
// external-etcd configuration puts it (pki/etcd/ca.crt,
// pki/apiserver-etcd-client.{crt,key}).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func (c *Cluster) startEtcd(ctx context.Context) error {
	args := []string{c.Steward, "init", "--dir", c.StewardDir, "--name", "localkube"}
	if c.BinaryStore != "" {
		args = append(args, "--binary-store", c.BinaryStore)
	}
	for _, n := range c.Nodes {
		args = append(args, "--host", n.Name+"="+n.Addr)
	}
	if _, err := c.run(ctx, c.infraCgroup(), "", 0, args...); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		dir := filepath.Join(n.Dir, "steward")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		join := filepath.Join(dir, "join.yaml")
		b, err := os.ReadFile(filepath.Join(c.StewardDir, "join", n.Name+".yaml"))
		if err != nil {
			return err
		}
		if err := os.WriteFile(join, b, 0o600); err != nil {
			return err
		}
		if _, _, err := c.start(n.Cgroup+"/system", n.Netns, 0, filepath.Join(n.Dir, "logs", "steward-agent.log"),
			c.Steward, "agent", "--dir", dir, "--join", join, "--kube-manifests", n.KubeManifestsLink()); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
	}
	// up does not wait for agents: wait until each one's socket is there.
	for _, n := range c.Nodes {
		sock := filepath.Join(n.Dir, "steward", "run", "agent-"+n.Name+".sock")
		if err := poll(ctx, 30*time.Second, func() error {
			_, err := os.Stat(sock)
			return err
		}); err != nil {
			return fmt.Errorf("node %s: agent: %w (log: %s)", n.Name, err, filepath.Join(n.Dir, "logs", "steward-agent.log"))
		}
	}
	if _, err := c.run(ctx, c.infraCgroup(), "", 0, c.Steward, "up", "--dir", c.StewardDir); err != nil {
		return err
	}
	out := filepath.Join(c.Dir, "pki", "etcd-client")
	if _, err := c.run(ctx, c.infraCgroup(), "", 0, c.Steward, "certs", "issue-client", "kube-apiserver", "--dir", c.StewardDir, "--out", out); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		pk := filepath.Join(n.etcKubernetes(), "pki")
		for from, to := range map[string]string{
			"ca.crt":             "etcd/ca.crt",
			"kube-apiserver.crt": "apiserver-etcd-client.crt",
			"kube-apiserver.key": "apiserver-etcd-client.key",
		} {
			b, err := os.ReadFile(filepath.Join(out, from))
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(pk, to)), 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(pk, to), b, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// etcdServers are the members' client URLs.
func (c *Cluster) etcdServers() string {
	s := ""
	for i, n := range c.Nodes {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("https://%s:2379", n.Addr)
	}
	return s
}
