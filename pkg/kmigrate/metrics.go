package kmigrate

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of a migration, labelled by
// resource (kubectl's name). A nil *Metrics records nothing.
type Metrics struct {
	migrated, failed, skipped, retries *prometheus.CounterVec
	remaining                          *prometheus.GaugeVec
}

// NewMetrics creates the metrics and registers them with reg:
//
//	steward_migrate_objects_migrated_total{resource}  objects rewritten by this process
//	steward_migrate_objects_failed_total{resource}    objects the API server refused
//	steward_migrate_objects_skipped_total{resource}   objects deleted before their update
//	steward_migrate_retries_total{resource}           requests retried after a transient failure
//	steward_migrate_objects_remaining{resource}       objects left, estimated from the list's remainingItemCount
func NewMetrics(reg prometheus.Registerer) *Metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "steward", Subsystem: "migrate", Name: name, Help: help}, []string{"resource"})
	}
	m := &Metrics{
		migrated: counter("objects_migrated_total", "Objects rewritten in the current storage version by this process."),
		failed:   counter("objects_failed_total", "Objects the API server refused to rewrite."),
		skipped:  counter("objects_skipped_total", "Objects deleted between their list and their update."),
		retries:  counter("retries_total", "Requests sent again after a transient failure (429, 5xx, timeouts)."),
		remaining: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "steward", Subsystem: "migrate", Name: "objects_remaining",
			Help: "Objects of the resource left to migrate, estimated from the list's remainingItemCount."}, []string{"resource"}),
	}
	reg.MustRegister(m.migrated, m.failed, m.skipped, m.retries, m.remaining)
	return m
}

func (m *Metrics) object(resource string, o Outcome) {
	if m == nil {
		return
	}
	switch o {
	case Done:
		m.migrated.WithLabelValues(resource).Inc()
	case Skip:
		m.skipped.WithLabelValues(resource).Inc()
	default:
		m.failed.WithLabelValues(resource).Inc()
	}
}

func (m *Metrics) retry(resource string) {
	if m != nil {
		m.retries.WithLabelValues(resource).Inc()
	}
}

// begin initialises a resource's series so that they show from the start.
func (m *Metrics) begin(resource string) {
	if m == nil {
		return
	}
	m.migrated.WithLabelValues(resource)
	m.failed.WithLabelValues(resource)
	m.skipped.WithLabelValues(resource)
	m.retries.WithLabelValues(resource)
}

func (m *Metrics) setRemaining(resource string, n int64) {
	if m != nil && n >= 0 {
		m.remaining.WithLabelValues(resource).Set(float64(n))
	}
}
