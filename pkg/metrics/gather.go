package metrics

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/status"
)

// DirGatherer reads an agent's Snapshot from its Steward directory. Scrapes
// arriving within minInterval of the last read share it, so several
// Prometheus servers cost one status probe.
type DirGatherer struct {
	Dir, Agent string
	Log        *slog.Logger

	mu   sync.Mutex // held across a read: concurrent scrapes wait for it
	last Snapshot   // guarded by mu
	at   time.Time  // guarded by mu: when last was read
}

// minInterval is how long a read serves later scrapes.
const minInterval = time.Second

// Gather returns a fresh Snapshot (or the one read less than minInterval ago).
func (g *DirGatherer) Gather(ctx context.Context) Snapshot {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.at.IsZero() && time.Since(g.at) < minInterval {
		return g.last
	}
	g.last, g.at = g.read(ctx), time.Now()
	return g.last
}

func (g *DirGatherer) read(ctx context.Context) Snapshot {
	var s Snapshot
	c, err := cluster.Open(g.Dir)
	if err != nil {
		if !errors.Is(err, cluster.ErrNoSpec) {
			g.Log.Warn("metrics: open the cluster spec", "err", err)
		}
		return s
	}
	s.Certificates = Certificates(c.Spec.CertDir(g.Dir))
	if st, err := status.Get(ctx, c); err != nil {
		g.Log.Warn("metrics: cluster status", "err", err)
	} else {
		s.Status = st
	}
	if c.Spec.Backup.Continuous {
		for _, l := range backup.ReadLoopStatuses(filepath.Join(g.Dir, "status")) {
			if l.Agent == g.Agent && l.Role == "leader" {
				s.Loop = &l
			}
		}
	}
	s.FullSchedule = c.Spec.Backup.FullSchedule
	s.RecoveryPointGoal = time.Duration(c.Spec.Backup.DeltaMaxAgeMs) * time.Millisecond
	s.RecoveryCounts, s.RecoveryCountsUnreadable = recoveryCounts(c, g.Dir, g.Agent, g.Log)
	store := plan.OpenStore(g.Dir)
	if _, err := os.Stat(store.Path()); err == nil {
		if p, err := store.Latest(); err == nil {
			s.Plan = p
		} else if !errors.Is(err, plan.ErrNoPlan) {
			g.Log.Warn("metrics: latest plan", "err", err)
		}
	}
	return s
}

// recoveryCounts are the automatic recovery's counts agent exports
// (Snapshot.RecoveryCounts): its directory's own when it acts for it, the
// ones its coordinator pushed on a host of a multi-host cluster, else
// none; unreadable when the file cannot be read.
func recoveryCounts(c *cluster.Cluster, dir, agent string, log *slog.Logger) (_ []recoverycount.Counts, unreadable bool) {
	switch {
	case c.AutoRecoveryActor(agent):
		ar, err := status.ReadAutoRecovery(dir)
		if err != nil {
			log.Warn("metrics: automatic recovery state", "err", err)
			return nil, true
		}
		if rc, ok := ar.Counts(); ok {
			return []recoverycount.Counts{rc}, false
		}
	case c.Spec.MultiHost():
		r, err := recoverycount.Read(dir)
		if err != nil {
			log.Warn("metrics: automatic recovery counts", "err", err)
			return nil, true
		}
		if r != nil {
			return r.Recorders, false
		}
	}
	return nil, false
}

// Certificates are the certificates of an agent's certificate directory
// as the certificate inventory lists them (pki.Inventory: the CA, the
// members' server and peer certificates, the admin client, on a joined
// host the agent's own, and every issued client as clients/NAME), with
// their expiry, sorted by name. Unreadable ones are left out (the
// CertificatesReady condition names them).
func Certificates(certDir string) []Certificate {
	inv, _ := pki.Inventory(certDir)
	var out []Certificate
	for _, c := range inv {
		if c.Error == "" {
			out = append(out, Certificate{Name: c.Name, NotAfter: c.NotAfter})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
