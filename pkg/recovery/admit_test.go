package recovery

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/etcd-steward/steward/pkg/plan"
)

// TestAdmitRecovery: a recovery waits for no plan runner's lock and reads
// past an unreadable plan store, but refuses under an open plan, with
// the words end-to-end tests look for (the command adds how to resume or
// abort it: cli.LibraryAdvice, on ErrPlanOpen).
func TestAdmitRecovery(t *testing.T) {
	for _, tc := range []struct {
		name   string
		state  plan.State // "": no plan
		broken bool
		want   string
	}{
		{name: "no plan"},
		{name: "done", state: plan.Done},
		{name: "aborted", state: plan.Aborted},
		{name: "failed", state: plan.Failed, want: "refusing to recover: plan upgrade-1 is failed and stops members on purpose"},
		{name: "running", state: plan.Running, want: "refusing to recover: plan upgrade-1 is running and stops members on purpose"},
		{name: "unreadable", broken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st := plan.OpenStore(dir)
			if tc.state != "" {
				if err := st.Save(t.Context(), &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: tc.state}); err != nil {
					t.Fatal(err)
				}
			}
			if tc.broken {
				if err := os.WriteFile(filepath.Join(dir, plan.DBName), []byte("not a database"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			l, err := st.TryLock() // a runner's lock refuses nothing here
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release()
			_, err = plan.Admit(st, admitRecovery)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want || !errors.Is(err, ErrPlanOpen)):
				t.Errorf("Admit = %v, want %q", err, tc.want)
			}
		})
	}
}
