package harness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-steward/steward/pkg/recovery"
	"github.com/etcd-steward/steward/pkg/spec"
)

// RemoveDataDirs deletes the data dirs of members: their data is lost.
func RemoveDataDirs(t *testing.T, e *Env, members []spec.Member) {
	t.Helper()
	for _, m := range members {
		if err := os.RemoveAll(filepath.Join(e.Dir, m.DataDir)); err != nil {
			t.Fatal(err)
		}
	}
}

// RecoverJSON runs `steward recover -o json` and returns its report and
// output.
func RecoverJSON(t *testing.T, e *Env) (recovery.Report, string) {
	t.Helper()
	out := e.MustRun("recover", "-o", "json")
	var rep recovery.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("recover report: %v\n%s", err, out)
	}
	return rep, out
}
