package metrics

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
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
	if st, err := c.Status(ctx); err != nil {
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

// Certificates are the certificates in an agent's certificate directory
// (every *.crt: the CA, the members' server and peer certificates, the
// client certificate and, on a joined host, the agent's own), with their
// expiry. Unreadable files are left out.
//
// This is the one place the metrics learn which certificates exist; it
// is meant to give way to the certificate inventory's expiry function.
func Certificates(certDir string) []Certificate {
	files, _ := filepath.Glob(filepath.Join(certDir, "*.crt"))
	sort.Strings(files)
	var out []Certificate
	for _, f := range files {
		cert, err := pki.ReadCertificate(f)
		if err != nil {
			continue
		}
		out = append(out, Certificate{Name: strings.TrimSuffix(filepath.Base(f), ".crt"), NotAfter: cert.NotAfter})
	}
	return out
}
