package harness

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/backup"
)

// BackupNow runs `steward backup now -o json` with args and returns the
// manifest of the backup it took.
func BackupNow(t *testing.T, e *Env, args ...string) backup.Manifest {
	t.Helper()
	var m backup.Manifest
	out := e.MustRun(append([]string{"backup", "now", "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("backup now output: %v\n%s", err, out)
	}
	return m
}

// ListBackups returns `steward backup list -o json`, parsed.
func ListBackups(t *testing.T, e *Env) []backup.Manifest {
	t.Helper()
	var ms []backup.Manifest
	if err := json.Unmarshal([]byte(e.MustRun("backup", "list", "-o", "json")), &ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// WaitBackedUp polls until the backups hold revision rev (60 s at most).
func WaitBackedUp(t *testing.T, e *Env, rev int64) {
	t.Helper()
	WaitBackedUpWithin(t, e, rev, 60*time.Second, 50*time.Millisecond)
}

// WaitBackedUpWithin polls every poll until the backups hold revision rev,
// for at most timeout (benchmarks wait longer for larger data).
func WaitBackedUpWithin(tb testing.TB, e *Env, rev int64, timeout, poll time.Duration) {
	tb.Helper()
	Eventually(tb, timeout, poll, fmt.Sprintf("backups to reach revision %d", rev), func() error {
		so, se, err := e.Run("backup", "list", "-o", "json")
		if err != nil {
			return fmt.Errorf("steward backup list: %v: %s", err, strings.TrimSpace(se))
		}
		var ms []backup.Manifest
		if err := json.Unmarshal([]byte(so), &ms); err != nil {
			return fmt.Errorf("parse backup list: %v", err)
		}
		var end int64
		for _, m := range ms {
			end = max(end, m.EndRevision)
		}
		if end < rev {
			return fmt.Errorf("%d backups, the newest revision backed up is %d", len(ms), end)
		}
		return nil
	})
}
