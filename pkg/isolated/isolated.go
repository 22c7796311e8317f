// Package isolated runs members on private client ports until a write goes
// through raft (an offline migration step of upgrade, a recovery's seed).
package isolated

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/spec"
)

// probeKey is named in the write probe of an isolated run. The probe's
// compare can never hold, so the key is never written.
const probeKey = "\x00steward/isolated-probe"

// Options configure Run.
type Options struct {
	// Snapshot makes each member write a raft snapshot (--snapshot-count=1)
	// and waits for the file, so that the next version replays no WAL
	// entry this or an older version wrote.
	Snapshot bool
	// Timeout bounds the wait for the write (and the snapshot).
	Timeout time.Duration
	// ForceNewCluster starts the members with --force-new-cluster (see
	// memberrt.MemberConfig); the write then proves that the single member
	// commits on its own. Only the isolated run has the flag.
	ForceNewCluster bool
}

// Run is one step of the offline migration of Kubernetes' etcd
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
func Run(ctx context.Context, c *cluster.Cluster, names []string, version string, o Options) error {
	type run struct {
		m   spec.Member
		rt  memberrt.Runtime
		cfg memberrt.MemberConfig
	}
	var runs []run
	var endpoints []string
	for _, name := range names {
		m, err := c.Member(name)
		if err != nil {
			return err
		}
		rt, err := c.RuntimeFor(m)
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
		runs = append(runs, run{m, rt, cfg})
		endpoints = append(endpoints, cfg.ClientURL)
	}
	started := time.Now()
	// A member on another host: its agent reports the newest raft
	// snapshot's time by that host's clock; one newer than before the run
	// is this run's.
	before := map[string]time.Time{}
	for _, r := range runs {
		if o.Snapshot && c.OnOtherHost(r.m) {
			ms, err := r.rt.Member(ctx, r.m.Name)
			if err != nil {
				return fmt.Errorf("member %s on host %s: %w", r.m.Name, r.m.Agent, err)
			}
			before[r.m.Name] = ms.NewestSnapshot
		}
	}
	var werr error
	for _, r := range runs {
		if _, err := r.rt.PutMember(ctx, r.cfg); err != nil {
			werr = fmt.Errorf("configure member %s on a private client port: %w", r.m.Name, err)
			break
		}
		if _, err := r.rt.SwapVersion(ctx, r.m.Name, memberrt.VersionRequest{Version: version}); err != nil {
			werr = fmt.Errorf("start member %s on etcd %s on a private client port: %w", r.m.Name, version, err)
			break
		}
		c.Progress.Say("member %s runs etcd %s on a private client port (%s)", r.m.Name, version, r.cfg.ClientURL)
	}
	if werr == nil {
		if err := probeWrite(ctx, c, endpoints, o.Timeout); err != nil {
			werr = fmt.Errorf("etcd %s on private client ports %v: %w; the members' logs are in %s", version, endpoints, err, filepath.Join(c.Dir, "logs"))
		}
	}
	// The write can go through before the agent has seen the member answer
	// on its new version; only then does it record that version for the
	// data dir, and the next step's version check reads that record.
	for _, r := range runs {
		if werr == nil {
			if err := waitRunning(ctx, r.rt, r.m.Name, o.Timeout); err != nil {
				werr = fmt.Errorf("member %s on etcd %s: %w", r.m.Name, version, err)
			}
		}
	}
	for _, r := range runs {
		if werr == nil && o.Snapshot {
			wait := func() error { return waitSnapshot(ctx, r.cfg.DataDir, started, o.Timeout) }
			if c.OnOtherHost(r.m) {
				wait = func() error { return waitSnapshotOf(ctx, r.rt, r.m.Name, before[r.m.Name], o.Timeout) }
			}
			if err := wait(); err != nil {
				werr = fmt.Errorf("member %s on etcd %s: %w", r.m.Name, version, err)
			}
		}
	}
	// Stop them and hand the agents the real config back, even after a
	// failure: a member must never stay on a port its clients do not know.
	for _, r := range runs {
		if _, err := r.rt.Stop(ctx, r.m.Name); err != nil {
			return errors.Join(werr, fmt.Errorf("stop member %s after its isolated run: %w", r.m.Name, err))
		}
		if werr == nil {
			if err := c.RecordMemberVersion(ctx, r.m.Name, version); err != nil {
				return err
			}
		}
		nm, _ := c.Spec.Member(r.m.Name)
		if _, err := r.rt.PutMember(ctx, c.MemberConfig(*nm)); err != nil {
			return errors.Join(werr, fmt.Errorf("restore the config of member %s: %w", r.m.Name, err))
		}
	}
	if werr != nil {
		return werr
	}
	c.Progress.Say("%s ran etcd %s on private client ports until a write went through, and stopped", strings.Join(names, ", "), version)
	return nil
}

// waitRunning waits until the runtime reports member name Running, which
// the agent does after writing the data dir's version record.
func waitRunning(ctx context.Context, rt memberrt.Runtime, name string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	state := "unknown"
	err := cluster.Poll(wctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		ms, err := rt.Members(ctx)
		if err != nil {
			return false, nil
		}
		for _, m := range ms {
			if m.Name == name {
				state = m.State
				return m.State == memberrt.StateRunning, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("its agent did not report it running within %s (state %s)", timeout, state)
	}
	return nil
}

// probeWrite waits until a write through raft succeeds at endpoints.
func probeWrite(ctx context.Context, c *cluster.Cluster, endpoints []string, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A client made before anything listens backs off for seconds between
	// its connection attempts: wait until a port accepts first.
	err := cluster.Poll(wctx, 20*time.Millisecond, func(context.Context) (bool, error) {
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
	err = cluster.Poll(wctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
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

// waitSnapshotOf waits until the runtime reports a raft snapshot of member
// name newer than before.
func waitSnapshotOf(ctx context.Context, rt memberrt.Runtime, name string, before time.Time, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := cluster.Poll(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		ms, err := rt.Member(ctx, name)
		return err == nil && ms.NewestSnapshot.After(before), nil
	})
	if err != nil {
		return fmt.Errorf("its agent reported no raft snapshot newer than %s within %s", before.Format(time.RFC3339Nano), timeout)
	}
	return nil
}

// waitSnapshot waits until a raft snapshot file newer than since exists in
// the data dir.
func waitSnapshot(ctx context.Context, dataDir string, since time.Time, timeout time.Duration) error {
	snapDir := filepath.Join(dataDir, "member", "snap")
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := cluster.Poll(wctx, 200*time.Millisecond, func(context.Context) (bool, error) {
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
