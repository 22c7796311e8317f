package harness

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/etcd-steward/steward/pkg/kmigrate"
	"github.com/etcd-steward/steward/pkg/kstorage"
)

// InspectJSON runs `steward inspect storage-versions -o json` with args and
// returns its report.
func InspectJSON(t *testing.T, e *Env, args ...string) kstorage.Report {
	t.Helper()
	out := e.MustRun(append([]string{"inspect", "storage-versions", "-o", "json"}, args...)...)
	var rep kstorage.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("inspect output: %v\n%s", err, out)
	}
	return rep
}

// InspectResource returns the report of resource name in rep (zero when
// rep has none).
func InspectResource(rep kstorage.Report, name string) kstorage.ResourceReport {
	for _, r := range rep.Resources {
		if r.Resource == name {
			return r
		}
	}
	return kstorage.ResourceReport{}
}

// MigrateReport runs `steward migrate storage ARGS -o json` and parses its
// summary; ok says whether the command must succeed.
func MigrateReport(t *testing.T, e *Env, ok bool, args ...string) (kmigrate.Report, string) {
	t.Helper()
	so, se, err := e.Run(append([]string{"migrate", "storage", "-o", "json"}, args...)...)
	if (err == nil) != ok {
		t.Fatalf("steward migrate storage %s: exit error %v, want success %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, ok, so, se)
	}
	var rep kmigrate.Report
	if err := json.Unmarshal([]byte(so), &rep); err != nil {
		t.Fatalf("migrate summary: %v\nstdout: %s\nstderr: %s", err, so, se)
	}
	return rep, se
}

// MigrateResource returns the report of resource name in rep (zero when
// rep has none).
func MigrateResource(rep kmigrate.Report, name string) kmigrate.ResourceReport {
	for _, r := range rep.Resources {
		if r.Resource == name {
			return r
		}
	}
	return kmigrate.ResourceReport{}
}
