// Package metrics is what an agent tells Prometheus: its members' health
// (up, role, database size, applied index lag, alarms), the cluster as it
// sees it (quorum, voting members, leader changes), the continuous backups
// it leads (age of the last full and delta uploads, the newest backed-up
// revision and its lag, bytes uploaded, failures), the latest upgrade or
// rollback plan, the expiry of the certificates it uses, and the automatic
// recovery actions it took.
//
// Gauges are read at scrape time (Collector, from the agent's directory:
// the spec, a status probe through pkg/cluster, the backup loop's report,
// the plan store, the certificate files, the automatic recovery's state
// file, whose action counts steward_recovery_actions_total exports);
// counters of backup events are incremented where the events happen
// (BackupUploaded, BackupFailed). Run serves them at the agent's metricsAddress. Every
// series carries the labels cluster and agent (the registry adds them), so
// several agents scraped at once never collide; member series add member.
// docs/metrics.md lists every metric, label and alert.
package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Event counters. They are package-level because the events happen in the
// daemons an agent process runs beside its supervisor (one agent per
// process); every registry NewRegistry makes exports them.
var (
	backupUploadedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steward_backup_uploaded_bytes_total",
		Help: "Bytes of backup objects this agent stored, by kind (full snapshot or delta segment).",
	}, []string{"kind"})
	backupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "steward_backup_failures_total",
		Help: "Rounds of the continuous backup loop that ended in an error (each is retried).",
	}, nil)
)

// Backup object kinds for BackupUploaded.
const (
	KindFull  = "full"
	KindDelta = "delta"
)

func init() {
	// Every label value shows from the start (0), so rate() and increase()
	// see the first event.
	backupUploadedBytes.WithLabelValues(KindFull)
	backupUploadedBytes.WithLabelValues(KindDelta)
	backupFailures.WithLabelValues()
}

// BackupUploaded records a stored backup object of kind (KindFull,
// KindDelta) and size bytes.
func BackupUploaded(kind string, bytes int64) {
	backupUploadedBytes.WithLabelValues(kind).Add(float64(max(bytes, 0)))
}

// BackupFailed records a failed round of the continuous backup loop.
func BackupFailed() { backupFailures.WithLabelValues().Inc() }

// NewRegistry returns a registry (not the global default) with the
// Collector of agent in dir, the event counters, and the Go runtime and
// process collectors; the Steward series carry cluster and agent labels.
func NewRegistry(clusterName, agent string, col *Collector) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"cluster": clusterName, "agent": agent}, reg)
	for _, c := range []prometheus.Collector{col, backupUploadedBytes, backupFailures} {
		if err := wrapped.Register(c); err != nil {
			return nil, errors.Join(errors.New("register metrics"), err)
		}
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return nil, err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return nil, err
	}
	return reg, nil
}
