package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/join"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// InitOptions configure Init.
type InitOptions struct {
	spec.HostsOptions
	// S3, when set, is where the cluster's backups go (continuous
	// backups are on then; a multi-host cluster's agents all reach it).
	S3 *spec.S3
	// BinaryStore is written into the spec (empty: DIR/binaries).
	BinaryStore string
	// JoinValidity is how long the join files can be used (default
	// join.DefaultValidity).
	JoinValidity time.Duration
}

// JoinPath is where the coordinator writes a host's join file.
func JoinPath(dir, host string) string { return filepath.Join(dir, "join", host+".yaml") }

// Init writes a new multi-host cluster into the coordinator's directory:
// the spec (members spread over the hosts), the CA and the admin client
// certificate, and one join file per host. It refuses a directory that
// already holds a spec (ErrDirHoldsCluster), and writes the spec last, so a failed init leaves
// no cluster behind. A backup.s3.caFile that does not verify the S3
// server is refused before anything is written (cluster.CheckS3CA).
func Init(ctx context.Context, dir string, o InitOptions, say progress.Func) (*cluster.Cluster, []string, error) {
	specPath := filepath.Join(dir, spec.FileName)
	if _, err := os.Stat(specPath); err == nil {
		return nil, nil, refusal.New(ErrDirHoldsCluster, "%s already exists: this directory holds a cluster", specPath)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	v := o.Version
	if v == "" {
		v = binaries.EmbeddedVersion()
	}
	nv, err := binaries.NormalizeVersion(v)
	if err != nil {
		return nil, nil, err
	}
	o.Version = nv
	s, err := spec.NewMultiHost(o.HostsOptions)
	if err != nil {
		return nil, nil, err
	}
	s.BinaryStore = o.BinaryStore
	if o.S3 != nil {
		s.Backup.S3 = o.S3
		s.Backup.Continuous = true
	}
	c := &cluster.Cluster{Dir: dir, Spec: s, Progress: say}
	warnings, err := c.ValidateSpec(s)
	if err != nil {
		return nil, warnings, err
	}
	if w, err := c.CheckS3CA(ctx, s); err != nil {
		return nil, warnings, err
	} else if w != "" {
		warnings = append(warnings, w)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, warnings, fmt.Errorf("steward dir: %w", err)
	}
	if err := c.EnsureCerts(); err != nil {
		return nil, warnings, err
	}
	for _, a := range s.Agents {
		if err := writeJoin(c, a, o.JoinValidity); err != nil {
			return nil, warnings, err
		}
	}
	if err := s.Save(specPath); err != nil {
		return nil, warnings, err
	}
	say.Say("wrote %s (%d members on %d hosts, etcd %s)", specPath, len(s.Members), len(s.Agents), s.Version)
	if o.S3 == nil {
		say.Say("continuous backups are off: no S3 store was given (set backup.s3 in %s before %v, see docs/backup.md)", specPath, progress.Hint{Kind: HintUp, Plain: "the cluster is brought up"})
	}
	return c, warnings, nil
}

// AddHost adds a host (one agent) to the spec and writes its join file. For
// a host already in the spec at the same address it writes a new join file
// (new certificates), for instance after the first one expired.
func AddHost(ctx context.Context, c *cluster.Cluster, h spec.Host, port int, validity time.Duration) (string, error) {
	if c.Spec.TLS.Disabled {
		return "", errors.New("hosts join over mutual TLS, and this cluster has TLS off")
	}
	if port == 0 {
		port = spec.DefaultAgentPort
	}
	s := c.Spec.Clone()
	if a, ok := s.Agent(h.Name); ok {
		if !a.Remote() || a.Host != h.Address {
			return "", fmt.Errorf("host %s is already in the spec (%s): remove its members and edit the agents list to move it", h.Name, a.Endpoint())
		}
		if err := writeJoin(c, *a, validity); err != nil {
			return "", err
		}
		return JoinPath(c.Dir, h.Name), nil
	}
	a := spec.Agent{Name: h.Name, Host: h.Address, Port: port}
	s.Agents = append(s.Agents, a)
	if _, err := c.ValidateSpec(s); err != nil {
		return "", err
	}
	if err := writeJoin(c, a, validity); err != nil {
		return "", err
	}
	if err := c.SaveSpec(ctx, s); err != nil {
		// The host is not in the spec: its new join file goes too.
		_ = os.Remove(JoinPath(c.Dir, h.Name))
		return "", err
	}
	return JoinPath(c.Dir, h.Name), nil
}

func writeJoin(c *cluster.Cluster, a spec.Agent, validity time.Duration) error {
	if validity == 0 {
		validity = join.DefaultValidity
	}
	b, err := pki.IssueHost(c.CertDir(), c.Spec.Name, a.Name, a.Host, c.Validity(), c.Spec.TLS.ServerNames...)
	if err != nil {
		return err
	}
	f := join.New(c.Spec.Name, c.Spec.Token, a.Name, a.Host, a.Port, b, time.Now().Add(validity))
	if err := f.Write(JoinPath(c.Dir, a.Name)); err != nil {
		return err
	}
	return nil
}

// WriteJoin writes the join file of agent a (JoinPath) without adding it to
// the spec: for a host whose agent must run before the spec names it (the
// operator's next pod: a spec change asks every agent it names).
func WriteJoin(c *cluster.Cluster, a spec.Agent, validity time.Duration) error {
	return writeJoin(c, a, validity)
}
