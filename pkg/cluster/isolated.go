package cluster

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/spec"
)

// probeKey is named in the write probe of an isolated run. The probe's
// compare can never hold, so the key is never written.
const probeKey = "\x00steward/isolated-probe"

// IsolatedOptions configure RunMemberIsolated.
type IsolatedOptions struct {
	// Snapshot makes the member write a raft snapshot (--snapshot-count=1)
	// and waits for the file, so that the next version replays no WAL
	// entry this or an older version wrote.
	Snapshot bool
	// Timeout bounds the wait for the write (and the snapshot).
	Timeout time.Duration
}

// RunMemberIsolated is one step of the offline migration of Kubernetes'
// etcd migration script: it starts a member on version with its client and
// peer listeners on fresh ports no client knows, waits until a write goes
// through raft, then stops it. The member is left stopped, with its real
// config on version recorded in the spec and given to its agent, so that a
// crash or an abort after this call leaves a member that `steward up`
// starts on the version its data was migrated to.
//
// The probe write is a transaction whose compare never holds: it is
// proposed, committed and applied like any write, and changes nothing.
func (c *Cluster) RunMemberIsolated(ctx context.Context, name, version string, o IsolatedOptions) error {
	m, err := c.memberOrError(name)
	if err != nil {
		return err
	}
	ac, err := c.AgentFor(m)
	if err != nil {
		return err
	}
	cfg := c.MemberConfig(m)
	cfg.Version = version
	if cfg.ClientURL, err = isolatedURL(m.ClientURL); err != nil {
		return err
	}
	if cfg.PeerURL, err = isolatedURL(m.PeerURL); err != nil {
		return err
	}
	if o.Snapshot {
		cfg.SnapshotCount = 1
	}
	started := time.Now()
	if _, err := ac.PutMember(ctx, cfg); err != nil {
		return fmt.Errorf("configure member %s on private ports: %w", name, err)
	}
	if _, err := ac.SwapVersion(ctx, name, agentapi.VersionRequest{Version: version}); err != nil {
		return fmt.Errorf("start member %s on etcd %s on private ports: %w", name, version, err)
	}
	c.progress("member %s runs etcd %s on private ports (client %s)", name, version, cfg.ClientURL)
	werr := c.probeWrite(ctx, cfg.ClientURL, o.Timeout)
	if werr == nil && o.Snapshot {
		werr = waitSnapshot(ctx, cfg.DataDir, started, o.Timeout)
	}
	if werr != nil {
		werr = fmt.Errorf("member %s on etcd %s (private client URL %s): %w; its log: `steward status` names it", name, version, cfg.ClientURL, werr)
	}
	// Stop it and hand the agent the real config back, even after a
	// failure: the member must never stay on ports its clients do not know.
	if _, err := ac.Stop(ctx, name); err != nil {
		return fmt.Errorf("stop member %s after its isolated run: %w", name, err)
	}
	if werr != nil {
		if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
			return fmt.Errorf("%w; and restoring its config failed: %v", werr, err)
		}
		return werr
	}
	if err := c.recordMemberVersion(name, version); err != nil {
		return err
	}
	nm, _ := c.Spec.Member(name)
	if _, err := ac.PutMember(ctx, c.MemberConfig(*nm)); err != nil {
		return fmt.Errorf("restore the config of member %s: %w", name, err)
	}
	c.progress("member %s migrated its data on etcd %s and stopped", name, version)
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

// probeWrite waits until a write through raft succeeds at endpoint.
func (c *Cluster) probeWrite(ctx context.Context, endpoint string, timeout time.Duration) error {
	cli, err := c.Client(endpoint)
	if err != nil {
		return err
	}
	defer cli.Close()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	err = poll(wctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
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

// waitSnapshot waits until a raft snapshot file newer than since exists in
// the data dir.
func waitSnapshot(ctx context.Context, dataDir string, since time.Time, timeout time.Duration) error {
	snapDir := filepath.Join(dataDir, "member", "snap")
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := poll(wctx, 200*time.Millisecond, func(context.Context) (bool, error) {
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
