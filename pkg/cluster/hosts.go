package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/spec"
)

// PushSpec hands every agent on another host the spec and the contents of
// the backup secrets it names (S3 credentials, the encryption key), so the
// continuous backup loop runs there, and writes a signed copy of the spec
// into the backup store for another coordinator (package handover). It
// tries every host and returns the failures joined; a host that misses one
// push gets the spec with the next.
func (c *Cluster) PushSpec(ctx context.Context) error {
	if !c.Spec.MultiHost() {
		return nil
	}
	b, err := yaml.Marshal(c.Spec)
	if err != nil {
		return err
	}
	var copyErr error
	if h, err := c.Handover(ctx); err != nil {
		copyErr = fmt.Errorf("copy the spec for another coordinator: %w", err)
	} else if err := h.SaveSpec(ctx, b); err != nil {
		copyErr = fmt.Errorf("copy the spec for another coordinator: %w", err)
	}
	f := agentapi.ClusterFiles{Spec: string(b)}
	if s3 := c.Spec.Backup.S3; s3 != nil && s3.CredentialsFile != "" {
		creds, err := os.ReadFile(spec.Path(c.Dir, s3.CredentialsFile))
		if err != nil {
			return fmt.Errorf("hand the spec to the hosts: S3 credentials: %w", err)
		}
		f.S3Credentials = string(creds)
	}
	if s3 := c.Spec.Backup.S3; s3 != nil && s3.CAFile != "" {
		p := spec.Path(c.Dir, s3.CAFile)
		ca, err := os.ReadFile(p)
		if err == nil {
			_, err = backup.ParseCABundle(ca)
		}
		if err != nil {
			return fmt.Errorf("hand the spec to the hosts: S3 CA file %s: %w", p, err)
		}
		f.S3CA = string(ca)
	}
	if kf := c.Spec.Backup.EncryptionKeyFile; kf != "" {
		if err := backup.CheckKeyFileMode(spec.Path(c.Dir, kf)); err != nil {
			return fmt.Errorf("hand the spec to the hosts: %w", err)
		}
		key, err := os.ReadFile(spec.Path(c.Dir, kf))
		if err != nil {
			return fmt.Errorf("hand the spec to the hosts: backup key: %w", err)
		}
		f.BackupKey = string(key)
	}
	if _, err := c.BackupAuthKey(); err != nil {
		return fmt.Errorf("hand the spec to the hosts: %w", err)
	}
	ak, err := os.ReadFile(c.BackupAuthKeyPath())
	if err != nil {
		return fmt.Errorf("hand the spec to the hosts: cluster backup key: %w", err)
	}
	f.BackupAuthKey = string(ak)
	rs := hostset.Each(ctx, hostset.Remote(c.Spec), hostset.Options{Timeout: 10 * time.Second}, func(ctx context.Context, a spec.Agent) (struct{}, error) {
		ac, err := c.Agent(a.Name)
		if err != nil {
			return struct{}{}, err
		}
		return struct{}{}, oldAgentS3CA(ac.PutCluster(ctx, f))
	})
	return errors.Join(hostset.Join(rs, "hand the spec to "), copyErr)
}

// oldAgentS3CA names the cause when an agent that predates the S3 CA
// hand-over (agentapi.ClusterFiles.S3CA) refuses the field: that host
// keeps its previous copy of the spec, and is never left checking the S3
// server against its system roots.
func oldAgentS3CA(err error) error {
	var ae *agentapi.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(ae.Message, `unknown field "s3CA"`) {
		return fmt.Errorf("its agent predates backup.s3.caFile (it cannot take the S3 server's CA, and keeps its previous copy of the spec): upgrade Steward on that host: %w", err)
	}
	return err
}

// Admin reports whether this machine holds the admin client certificate,
// the only identity agents on other hosts let in. A host of a multi-host
// cluster (its copy of the spec, its host certificate) does not: it never
// asks other hosts' agents anything.
func (c *Cluster) Admin() bool {
	if c.Spec.TLS.Disabled || c.Spec.IsExternal() {
		// An attached cluster's directory holds the operator's own
		// certificate: it is the admin's, whatever its name.
		return true
	}
	cn, err := pki.CommonName(pki.FilesIn(c.CertDir()).ClientCert)
	return err == nil && cn == pki.AdminCN
}

// AutoRecoveryActor reports whether agent, run on this directory, is the
// process that runs its automatic recovery (recovery.RunAuto) and records
// it in DIR/status/autorecovery.json: on a multi-host cluster the
// coordinator's directory (Admin), whichever of its processes runs; on one
// host the spec's first agent. The metrics collector exports the recorded
// counts from the actor alone, so several agents on one directory never
// count one recovery twice.
func (c *Cluster) AutoRecoveryActor(agent string) bool {
	if len(c.Spec.Agents) == 0 {
		return false
	}
	if c.Spec.MultiHost() {
		return c.Admin()
	}
	return c.Spec.Agents[0].Name == agent
}

// PushRecoveryCounts hands the agent named agent (on another host) this
// directory's automatic recovery counts, which it keeps merged with those
// it holds and exports (recoverycount.Merge; pkg/recovery's sharer).
func (c *Cluster) PushRecoveryCounts(ctx context.Context, agent string, rc recoverycount.Counts) error {
	ac, err := c.Agent(agent)
	if err != nil {
		return err
	}
	return ac.PutRecoveryCounts(ctx, rc)
}

// LoopStatuses gathers the backup loops' reports: this machine's status
// directory, and each agent's on another host (an unreachable one is
// skipped: its report would be stale anyway).
func (c *Cluster) LoopStatuses(ctx context.Context) []backup.LoopStatus {
	out := backup.ReadLoopStatuses(c.StatusDir())
	if !c.Spec.MultiHost() || !c.Admin() {
		return out
	}
	rs := hostset.Each(ctx, hostset.Remote(c.Spec), hostset.Options{Timeout: ProbeTimeout}, func(ctx context.Context, a spec.Agent) ([]json.RawMessage, error) {
		ac, err := c.Agent(a.Name)
		if err != nil {
			return nil, err
		}
		return ac.BackupStatuses(ctx)
	})
	for _, r := range rs {
		for _, raw := range r.Value {
			var s backup.LoopStatus
			if json.Unmarshal(raw, &s) == nil {
				out = append(out, s)
			}
		}
	}
	return out
}

// ErrAgentCannot means a host's agent cannot do what the spec asks of it
// (an older Steward there).
var ErrAgentCannot = errors.New("a host's agent cannot do what the spec asks")

// CheckAgentsCan refuses a multi-host spec s that asks of a host's agent
// what its version cannot do: recovery.mode auto needs every host's agent
// to leave the recovery to the coordinator (agentapi.CapRecoveryCoordinated);
// an older one would recover from its own host's view. prev is the spec s
// replaces (nil for a new cluster): only the agents agentsToAsk names are
// asked, so a change that neither turns recovery.mode to auto nor adds a
// host asks nobody, and one host down does not block the changes that
// recover or replace it. A host whose agent does not answer cannot be
// checked, and is refused too; the refusal names each host and changes
// nothing.
func (c *Cluster) CheckAgentsCan(ctx context.Context, prev, s *spec.Cluster) error {
	ask := agentsToAsk(prev, s)
	if len(ask) == 0 {
		return nil
	}
	// The agents are s's (some may be new): their clients are made from it.
	sc := &Cluster{Dir: c.Dir, Spec: s}
	rs := hostset.Each(ctx, ask, hostset.Options{Timeout: 5 * time.Second}, func(ctx context.Context, a spec.Agent) (agentapi.AgentInfo, error) {
		ac, err := sc.Agent(a.Name)
		if err != nil {
			return agentapi.AgentInfo{}, err
		}
		return ac.Info(ctx)
	})
	var errs []string
	for _, r := range rs {
		if msg := autoRecoveryCannot(r.Host, r.Value, r.Err); msg != "" {
			errs = append(errs, msg)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	return fmt.Errorf("%w: recovery.mode auto: %s; nothing was changed (or keep recovery.mode manual)", ErrAgentCannot, strings.Join(errs, "; "))
}

// agentsToAsk is the remote agents of s whose capability for automatic
// recovery CheckAgentsCan asks, when s replaces prev (nil: a new cluster):
// none unless s is a multi-host spec with recovery.mode auto; every one
// when prev's mode was not auto; else those prev did not have (by name,
// host and port: an agent moved to another host is a new one).
func agentsToAsk(prev, s *spec.Cluster) hostset.Hosts {
	if s == nil || !s.MultiHost() || s.Recovery.Mode != "auto" {
		return nil
	}
	var ask hostset.Hosts
	for _, a := range hostset.Remote(s) {
		if prev != nil && prev.Recovery.Mode == "auto" && slices.ContainsFunc(prev.Agents, func(p spec.Agent) bool {
			return p.Name == a.Name && p.Host == a.Host && p.Port == a.Port
		}) {
			continue
		}
		ask = append(ask, a)
	}
	return ask
}

// autoRecoveryCannot says why host a's agent, which answered info or err,
// cannot take part in automatic recovery across hosts; "" when it can.
func autoRecoveryCannot(a spec.Agent, info agentapi.AgentInfo, err error) string {
	switch {
	case err != nil:
		return fmt.Sprintf("host %s (%s): its agent cannot be asked whether it leaves automatic recovery to the coordinator: %v", a.Name, a.Host, err)
	case !slices.Contains(info.Capabilities, agentapi.CapRecoveryCoordinated):
		return fmt.Sprintf("host %s (%s): its agent is older than automatic recovery across hosts (it would recover from its own host's view): upgrade Steward on that host", a.Name, a.Host)
	}
	return ""
}
