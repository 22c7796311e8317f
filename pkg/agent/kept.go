package agent

import (
	"fmt"
	"path/filepath"

	"github.com/etcd-steward/steward/pkg/datadir"
)

// Kept copies of data dirs on this host (datadir.Kept): the coordinator
// lists them (GET /v1/kept) and removes the ones its prune decided on
// (POST /v1/kept/remove); the rule of what to keep is the coordinator's
// (pkg/restore, leftovers.go), which also holds its restore lock while it
// prunes, so no restore of this cluster stages here meanwhile.

// keptDirs are the directories kept copies live in on this host: beside
// each member's data dir, and under DIR/members/* (where a removed
// member's, which the agent forgot, stays); memberOf names the member of
// a data dir path.
func (a *Agent) keptDirs() (dirs []string, memberOf func(string) string) {
	byDir := map[string]string{}
	a.mu.Lock()
	ms := make(map[string]*member, len(a.members))
	for name, m := range a.members {
		ms[name] = m
	}
	a.mu.Unlock()
	// Each member's lock after the agent's is let go: never both held.
	for name, m := range ms {
		m.mu.Lock()
		dd := filepath.Clean(m.cfg.DataDir)
		m.mu.Unlock()
		byDir[dd] = name
	}
	return datadir.KeptDirs(a.opts.Dir, byDir)
}

// Kept lists the kept copies on this host.
func (a *Agent) Kept() ([]datadir.Kept, error) {
	dirs, member := a.keptDirs()
	return datadir.FindKept(dirs, member)
}

// RemoveKept removes one kept copy on this host (datadir.RemoveKept: only
// a directory named as one, beside a member's data dir). Invariant: only a
// copy of a data dir whose member this agent knows (a member's, or a
// removed member's under DIR/members): a kept-style name in a shared
// parent dir that belongs to no member (another cluster's) is refused.
func (a *Agent) RemoveKept(path string) error {
	dirs, memberOf := a.keptDirs()
	path = filepath.Clean(path)
	if base, _, _, ok := datadir.ParseKeptName(filepath.Base(path)); ok && memberOf(filepath.Join(filepath.Dir(path), base)) == "" {
		return badRequest{fmt.Errorf("%s is a copy of %s, the data dir of no member this agent runs: not removed", path, filepath.Join(filepath.Dir(path), base))}
	}
	if err := datadir.RemoveKept(path, dirs); err != nil {
		return badRequest{err}
	}
	a.log.Info("removed a kept copy", "path", path)
	return nil
}
