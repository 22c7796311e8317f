package backup

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
)

// LoopStatus is what one agent's continuous backup loop last reported. The
// loop (package backupd) writes it to STATUSDIR/backup-AGENT.json; status
// reads it for the BackupReady condition, and the agent for the newest
// backed-up revision.
type LoopStatus struct {
	Agent string `json:"agent"`
	Role  string `json:"role"` // leader or standby
	// Recording is true while the leader watches and stores every change.
	Recording    bool      `json:"recording"`
	NextRevision int64     `json:"nextRevision"`
	LastUpload   time.Time `json:"lastUpload,omitzero"`
	LastFull     time.Time `json:"lastFull,omitzero"`
	// BehindRevision is a revision the cluster had reached at least 6 s
	// before this report; when it is above NextRevision-1 the recorder is
	// not keeping up (or not receiving): the writes since are not backed up.
	BehindRevision int64 `json:"behindRevision,omitempty"`
	// Ignored names the manifests the loop did not trust, and why.
	Ignored     []string  `json:"ignored,omitempty"`
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	UpdatedAt   time.Time `json:"updatedAt"`

	// LastDelta is when the newest delta segment was stored.
	LastDelta time.Time `json:"lastDelta,omitzero"`
	// LastCompaction is when the leader last folded the chain into a new
	// full backup (backup.compactAfter); LastCompactionError why its last
	// attempt failed ("" after a success).
	LastCompaction      time.Time `json:"lastCompaction,omitzero"`
	LastCompactionError string    `json:"lastCompactionError,omitempty"`
}

// loopStatusPath is per agent: agents sharing a directory each report.
func loopStatusPath(statusDir, agent string) string {
	return filepath.Join(statusDir, "backup-"+agent+".json")
}

// WriteLoopStatus stamps s with the time and writes it atomically (0600).
func WriteLoopStatus(statusDir string, s LoopStatus) error {
	s.UpdatedAt = time.Now().UTC()
	if err := os.MkdirAll(statusDir, 0o700); err != nil {
		return fmt.Errorf("backup loop status: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(loopStatusPath(statusDir, s.Agent), b, 0o600); err != nil {
		return fmt.Errorf("backup loop status: %w", err)
	}
	return nil
}

// ReadLoopStatuses returns every agent's report; unreadable ones are skipped.
func ReadLoopStatuses(statusDir string) []LoopStatus {
	files, _ := filepath.Glob(filepath.Join(statusDir, "backup-*.json"))
	var out []LoopStatus
	for _, f := range files {
		var s LoopStatus
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

// ReadLoopStatus returns the report of the agent that leads backups (the
// freshest leader report; else the freshest report).
func ReadLoopStatus(statusDir string) (LoopStatus, bool) {
	return PickLoopStatus(ReadLoopStatuses(statusDir))
}

// PickLoopStatus returns the report of the agent that leads backups among
// reports (the freshest leader report; else the freshest report).
func PickLoopStatus(reports []LoopStatus) (LoopStatus, bool) {
	var best LoopStatus
	found := false
	for _, s := range reports {
		better := !found ||
			(s.Role == "leader") != (best.Role == "leader") && s.Role == "leader" ||
			(s.Role == "leader") == (best.Role == "leader") && s.UpdatedAt.After(best.UpdatedAt)
		if better {
			best, found = s, true
		}
	}
	return best, found
}

// NewestBackedUpRevision is the newest revision the backup loops reporting
// in statusDir say they stored (0 when none). The agent compares data dirs
// with it before it starts a member.
func NewestBackedUpRevision(statusDir string) int64 {
	var newest int64
	for _, s := range ReadLoopStatuses(statusDir) {
		newest = max(newest, s.NextRevision-1)
	}
	return newest
}
