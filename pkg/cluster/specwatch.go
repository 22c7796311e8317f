package cluster

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
)

// SpecWatch reports, in the agent's log, a cluster spec its loops cannot
// read: the backup loop, certificate renewal and metrics re-read
// cluster.yaml on their own and, on a broken one, each only skip their
// round, so a file broken by a hand edit went unnoticed while the agent
// ran on. Each distinct error is logged once, with the path; the spec
// readable again is logged once too. A directory with no spec yet (a host
// the coordinator has not handed it to) is not an error.
type SpecWatch struct {
	Dir string
	Log *slog.Logger

	// last is the error last logged ("" while the spec reads well). Only
	// the goroutine calling Check (Run's) touches it.
	last string
}

// specWatchInterval is how often Run checks the spec: as often as the
// metrics server re-reads it.
const specWatchInterval = 2 * time.Second

// Run calls Check every specWatchInterval until ctx ends.
func (w *SpecWatch) Run(ctx context.Context) {
	t := time.NewTicker(specWatchInterval)
	defer t.Stop()
	for {
		w.Check()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check opens the spec once and logs a change of its state.
func (w *SpecWatch) Check() {
	_, err := Open(w.Dir)
	path := filepath.Join(w.Dir, spec.FileName)
	switch {
	case err == nil || errors.Is(err, ErrNoSpec):
		if w.last != "" {
			w.Log.Info("cluster spec readable again", "path", path)
		}
		w.last = ""
	case err.Error() != w.last:
		w.last = err.Error()
		w.Log.Error("cluster spec unreadable: the agent's loops skip their rounds until it is fixed", "path", path, "err", err)
	}
}
