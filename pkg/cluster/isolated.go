package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/spec"
)

// probeKey is named in the write probe of an isolated run. The probe's
// compare can never hold, so the key is never written.
const probeKey = "\x00steward/isolated-probe"

// IsolatedOptions configure RunIsolated.
type IsolatedOptions struct {
	// Snapshot makes each member write a raft snapshot (--snapshot-count=1)
	// and waits for the file, so that the next version replays no WAL
	// entry this or an older version wrote.
	Snapshot bool
	// Timeout bounds the wait for the write (and the snapshot).
	Timeout time.Duration
	// ForceNewCluster starts the members with --force-new-cluster (see
	// agentapi.MemberConfig); the write then proves that the single member
	// commits on its own. Only the isolated run has the flag.
	ForceNewCluster bool
}

// RunIsolated is one step of the offline migration of Kubernetes' etcd
// migration script: it starts members on version with their client
// listeners on fresh ports no client knows (peer ports stay: only members
// use them), waits until a write goes through raft, then stops them. The
// members are left stopped, with their real config on version recorded in
// the spec and given to their agents, so that a crash or an abort after
// this call leaves members that `steward up` starts on the version their
// data was migrated to. A quorum of the cluster must be among names (with
// ForceNewCluster, one member is a quorum of its own).
//
// The probe write is a transaction whose compare never holds: it is
// proposed, committed and applied like any write, and changes nothing.
func (c *Cluster) RunIsolated(ctx context.Context, names []string, version string, o IsolatedOptions) error {
	type run struct {
		m   spec.Member
		ac  *agentapi.Client
		cfg agentapi.MemberConfig
	}
	var runs []run
	var endpoints []string
	for _, name := range names {
		m, err := c.Member(name)
		if err != nil {
			return err
		}
		ac, err := c.AgentFor(m)
		if err != nil {
			return err
		}
		cfg := c.MemberConfig(m)
		cfg.Version = version
		if cfg.ClientURL, err = c.PrivateClientURL(ctx, m); err != nil {
			return err
		}
		if o.Snapshot {
			cfg.SnapshotCount = 1
		}
		cfg.ForceNewCluster = o.ForceNewCluster
		runs = append(runs, run{m, ac, cfg})
		endpoints = append(endpoints, cfg.ClientURL)
	}
	started := time.Now()
	// A member on another host: its agent reports the newest raft
	// snapshot's time by that host's clock; one newer than before the run
	// is this run's.
	before := map[string]time.Time{}
	for _, r := range runs {
		if o.Snapshot && c.OnOtherHost(r.m) {
			ms, err := r.ac.Member(ctx, r.m.Name)
			if err != nil {
				return fmt.Errorf("member %s on host %s: %w", r.m.Name, r.m.Agent, err)
			}
			before[r.m.Name] = ms.NewestSnapshot
		}
	}
	var werr error
	for _, r := range runs {
		if _, err := r.ac.PutMember(ctx, r.cfg); err != nil {
			werr = fmt.Errorf("configure member %s on a private client port: %w", r.m.Name, err)
			break
		}
		if _, err := r.ac.SwapVersion(ctx, r.m.Name, agentapi.VersionRequest{Version: version}); err != nil {
			werr = fmt.Errorf("start member %s on etcd %s on a private client port: %w", r.m.Name, version, err)
			break
		}
		c.Progress.Say("member %s runs etcd %s on a private client port (%s)", r.m.Name, version, r.cfg.ClientURL)
	}
	if werr == nil {
		if err := c.probeWrite(ctx, endpoints, o.Timeout); err != nil {
			werr = fmt.Errorf("etcd %s on private client ports %v: %w; the members' logs are in %s", version, endpoints, err, filepath.Join(c.Dir, "logs"))
		}
	}
	// The write can go through before the agent has seen the member answer
	// on its new version; only then does it record that version for the
	// data dir, and the next step's version check reads that record.
	for _, r := range runs {
		if werr == nil {
			if err := waitAgentRunning(ctx, r.ac, r.m.Name, o.Timeout); err != nil {
				werr = fmt.Errorf("member %s on etcd %s: %w", r.m.Name, version, err)
			}
		}
	}
	for _, r := range runs {
		if werr == nil && o.Snapshot {
			wait := func() error { return WaitSnapshot(ctx, r.cfg.DataDir, started, o.Timeout) }
			if c.OnOtherHost(r.m) {
				wait = func() error { return waitSnapshotOf(ctx, r.ac, r.m.Name, before[r.m.Name], o.Timeout) }
			}
			if err := wait(); err != nil {
				werr = fmt.Errorf("member %s on etcd %s: %w", r.m.Name, version, err)
			}
		}
	}
	// Stop them and hand the agents the real config back, even after a
	// failure: a member must never stay on a port its clients do not know.
	for _, r := range runs {
		if _, err := r.ac.Stop(ctx, r.m.Name); err != nil {
			return errors.Join(werr, fmt.Errorf("stop member %s after its isolated run: %w", r.m.Name, err))
		}
		if werr == nil {
			if err := c.RecordMemberVersion(ctx, r.m.Name, version); err != nil {
				return err
			}
		}
		nm, _ := c.Spec.Member(r.m.Name)
		if _, err := r.ac.PutMember(ctx, c.MemberConfig(*nm)); err != nil {
			return errors.Join(werr, fmt.Errorf("restore the config of member %s: %w", r.m.Name, err))
		}
	}
	if werr != nil {
		return werr
	}
	c.Progress.Say("%s ran etcd %s on private client ports until a write went through, and stopped", strings.Join(names, ", "), version)
	return nil
}

// PrivateClientURL is m's client URL with a free port no client knows, on
// the same host: the client listener of an isolated run, and of a learner
// until it votes (pkg/membership). Only a host's agent knows which of its
// ports are free, so a member on another host asks its agent.
func (c *Cluster) PrivateClientURL(ctx context.Context, m spec.Member) (string, error) {
	if !c.OnOtherHost(m) {
		return isolatedURL(m.ClientURL)
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return "", err
	}
	port, err := ac.FreePort(ctx, m.Name)
	if err != nil {
		return "", fmt.Errorf("a private client port for %s on host %s: %w", m.Name, m.Agent, err)
	}
	return withPort(m.ClientURL, port)
}

// waitAgentRunning waits until the agent reports member name Running, which
// it does after writing the data dir's version record.
func waitAgentRunning(ctx context.Context, ac *agentapi.Client, name string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	state := "unknown"
	err := Poll(wctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		ms, err := ac.Members(ctx)
		if err != nil {
			return false, nil
		}
		for _, m := range ms {
			if m.Name == name {
				state = m.State
				return m.State == agentapi.StateRunning, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("its agent did not report it running within %s (state %s)", timeout, state)
	}
	return nil
}

// isolatedURL is raw with a free port on the same host.
func isolatedURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse URL %q: %w", raw, err)
	}
	host := u.Hostname()
	port, err := spec.FreePort(host)()
	if err != nil {
		return "", err
	}
	u.Host = net.JoinHostPort(host, strconv.Itoa(port))
	return u.String(), nil
}

// withPort is raw with another port.
func withPort(raw string, port int) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("parse URL %q: %w", raw, err)
	}
	u.Host = net.JoinHostPort(u.Hostname(), strconv.Itoa(port))
	return u.String(), nil
}

// probeWrite waits until a write through raft succeeds at endpoints.
func (c *Cluster) probeWrite(ctx context.Context, endpoints []string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A client made before anything listens backs off for seconds between
	// its connection attempts: wait until a port accepts first.
	err := Poll(wctx, 20*time.Millisecond, func(context.Context) (bool, error) {
		for _, ep := range endpoints {
			u, err := url.Parse(ep)
			if err != nil {
				return false, err
			}
			if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
				conn.Close()
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("nothing listens on %v within %s", endpoints, timeout)
	}
	cli, err := c.Client(endpoints...)
	if err != nil {
		return err
	}
	defer cli.Close()
	var last error
	err = Poll(wctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, last = cli.Txn(pctx).
			If(clientv3.Compare(clientv3.Version(probeKey), "<", 0)).
			Then(clientv3.OpPut(probeKey, "")).
			Commit()
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("no write succeeded within %s: %v", timeout, last)
	}
	return nil
}

// waitSnapshotOf waits until the agent reports a raft snapshot of member
// name newer than before.
func waitSnapshotOf(ctx context.Context, ac *agentapi.Client, name string, before time.Time, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := Poll(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		ms, err := ac.Member(ctx, name)
		return err == nil && ms.NewestSnapshot.After(before), nil
	})
	if err != nil {
		return fmt.Errorf("its agent reported no raft snapshot newer than %s within %s", before.Format(time.RFC3339Nano), timeout)
	}
	return nil
}

// WaitSnapshot waits until a raft snapshot file newer than since exists in
// the data dir.
func WaitSnapshot(ctx context.Context, dataDir string, since time.Time, timeout time.Duration) error {
	snapDir := filepath.Join(dataDir, "member", "snap")
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := Poll(wctx, 200*time.Millisecond, func(context.Context) (bool, error) {
		snaps, _ := filepath.Glob(filepath.Join(snapDir, "*.snap"))
		for _, s := range snaps {
			if fi, err := os.Stat(s); err == nil && fi.ModTime().After(since) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no raft snapshot in %s within %s", snapDir, timeout)
	}
	return nil
}
