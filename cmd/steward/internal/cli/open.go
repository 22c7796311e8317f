package cli

import (
	"io"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/progress"
)

// Cluster checks the -o flag and opens the cluster of the Steward
// directory, with progress lines going to the command's stderr.
func (g *Globals) Cluster(cmd interface{ ErrOrStderr() io.Writer }) (*cluster.Cluster, error) {
	if err := g.CheckOutput(); err != nil {
		return nil, err
	}
	dir, err := g.StewardDir()
	if err != nil {
		return nil, err
	}
	c, err := cluster.Open(dir)
	if err != nil {
		return nil, err
	}
	c.Progress = progress.To(cmd.ErrOrStderr())
	return c, nil
}
