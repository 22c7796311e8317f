package cli

import (
	"fmt"
	"io"

	"github.com/etcd-steward/steward/pkg/cluster"
)

// OpenCluster opens the cluster of the Steward directory, with progress
// lines going to w.
func (g *Globals) OpenCluster(w io.Writer) (*cluster.Cluster, error) {
	dir, err := g.StewardDir()
	if err != nil {
		return nil, err
	}
	c, err := cluster.Open(dir)
	if err != nil {
		return nil, err
	}
	c.Progress = w
	return c, nil
}

// Progress returns a printf-style progress function writing to w.
func Progress(w io.Writer) func(string, ...any) {
	return func(f string, a ...any) { fmt.Fprintf(w, f+"\n", a...) }
}

// Cluster checks the -o flag and opens the cluster of the Steward
// directory, with progress lines going to the command's stderr.
func (g *Globals) Cluster(cmd interface{ ErrOrStderr() io.Writer }) (*cluster.Cluster, error) {
	if err := g.CheckOutput(); err != nil {
		return nil, err
	}
	return g.OpenCluster(cmd.ErrOrStderr())
}
