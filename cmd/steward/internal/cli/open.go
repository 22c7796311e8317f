package cli

import (
	"fmt"
	"io"

	"github.com/etcd-steward/steward/pkg/cluster"
)

// Progress returns a printf-style progress function writing lines to w.
func Progress(w io.Writer) func(string, ...any) {
	return func(f string, a ...any) { fmt.Fprintf(w, f+"\n", a...) }
}

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
	c.Progress = cmd.ErrOrStderr()
	return c, nil
}
