package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/restore"
)

// TestAdvise: advice goes after an error of its kind word for word, and
// the chain is kept; nil and other errors pass unchanged.
func TestAdvise(t *testing.T) {
	kind := errors.New("no full backup")
	err := fmt.Errorf("%w in /d/backups", kind)
	got := Advise(err, kind, ": take one")
	if got.Error() != "no full backup in /d/backups: take one" || !errors.Is(got, kind) {
		t.Errorf("Advise = %v", got)
	}
	other := errors.New("permission denied")
	if Advise(other, kind, "x") != other || Advise(nil, kind, "x") != nil {
		t.Error("Advise changed an error of another kind, or nil")
	}
}

// TestMovedAdvice: the words the libraries no longer say (the commands
// and flags of the CLI) are added back by the command layer, so what the
// operator reads is what it was, letter for letter.
func TestMovedAdvice(t *testing.T) {
	active := func(state plan.State) *plan.Plan {
		return &plan.Plan{ID: "upgrade-1", Kind: plan.KindUpgrade, State: state}
	}
	rotation := func(state plan.State, drop plan.State) *plan.Plan {
		return &plan.Plan{ID: "ca-rotation-1", Kind: plan.KindCARotation, State: state,
			Steps: []plan.Step{{Index: 0, State: plan.Done}, {Index: 1, Kind: carotate.StepDrop, State: drop}}}
	}
	emptyStore, err := backup.NewLocalStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	_, noFull := kstorage.FetchBackup(t.Context(), emptyStore, nil, backup.ListOptions{}, "latest", t.TempDir())
	_, noSuch := kstorage.FetchBackup(t.Context(), emptyStore, nil, backup.ListOptions{}, "x", t.TempDir())
	_, listNoFull := backup.Listing{}.Find("latest", "/d/backups")
	_, unknownID := backup.Listing{Backups: []backup.Manifest{{ID: "a1"}, {ID: "b1"}}}.Find("b2", "/d/backups")
	for _, tc := range []struct {
		name string
		got  error
		want string
	}{
		// A new plan refused while another is active.
		{"active plan", PlanHint(plan.RefuseActive(active(plan.Failed))),
			"upgrade plan upgrade-1 is failed: `steward plan resume` finishes it, `steward plan abort` stops it"},
		{"active plan, upgrade apply", PlanHint(&plan.ActiveError{Plan: active(plan.Running), At: " at step 2 (swap etcd-1)", Abort: true, Undo: true}),
			"upgrade plan upgrade-1 is running at step 2 (swap etcd-1): `steward plan resume` finishes it, `steward plan abort` stops it, `steward rollback` undoes it"},
		{"active rollback", PlanHint(&plan.ActiveError{Plan: active(plan.Failed), Name: "rollback upgrade-1"}),
			"rollback upgrade-1 is failed: `steward plan resume` finishes it"},
		{"wrapped active plan", PlanHint(fmt.Errorf("adopt: %w", plan.RefuseActive(active(plan.Pending)))),
			"adopt: upgrade plan upgrade-1 is pending: `steward plan resume` finishes it, `steward plan abort` stops it"},
		// CA rotation rollback refusals.
		{"no plan", CARollbackHint(carotate.RollbackOf(nil)),
			"no CA rotation to roll back: there is no plan; `steward plan show` shows it"},
		{"another plan", CARollbackHint(carotate.RollbackOf(active(plan.Failed))),
			"no CA rotation to roll back: the latest plan is upgrade plan upgrade-1 (failed); `steward plan show` shows it"},
		{"a rollback done", CARollbackHint(carotate.RollbackOf(&plan.Plan{ID: "r-1", Kind: plan.KindCARotationRollback, State: plan.Done})),
			"no CA rotation to roll back: the latest plan is CA rotation rollback r-1 (done); `steward plan show` shows it"},
		{"a rollback active", PlanHint(CARollbackHint(carotate.RollbackOf(&plan.Plan{ID: "r-1", Kind: plan.KindCARotationRollback, State: plan.Failed}))),
			"CA rotation rollback r-1 is failed: `steward plan resume` finishes it"},
		{"rolled back already", CARollbackHint(carotate.RollbackOf(rotation(plan.RolledBack, plan.Pending))),
			"no CA rotation to roll back: CA rotation ca-rotation-1 was rolled back already"},
		{"rotation done", CARollbackHint(carotate.RollbackOf(rotation(plan.Done, plan.Done))),
			"the CA rotation is done (plan ca-rotation-1): its new CA is the CA; to change the CA again, run `steward certs rotate-ca`"},
		{"old CA dropped", CARollbackHint(carotate.RollbackOf(rotation(plan.Failed, plan.Failed))),
			"the old CA was dropped at step 2: `steward plan resume` finishes the rotation; to go back, run `steward certs rotate-ca` again after it"},
		{"a plan runs", CARollbackHint(carotate.ErrPlanRunning),
			"another steward process is running a plan in this Steward directory: `steward plan abort` stops it after its step, then `steward rollback` rolls a CA rotation back"},
		{"a plan runs elsewhere", CARollbackHint(plan.ErrLocked), plan.ErrLocked.Error()},
		// Backups.
		{"no full backup", BackupHint(listNoFull), "no full backup in /d/backups: take one with `steward backup now`"},
		{"no full backup to inspect", BackupHint(noFull), "no full backup in " + emptyStore.String() + ": take one with `steward backup now`"},
		{"no such backup", BackupHint(noSuch), `no backup "x" in ` + emptyStore.String() + ": list the backups with `steward backup list` (or name `latest`)"},
		{"unknown ID", BackupHint(unknownID), `no backup "b2" in /d/backups: it holds 2, the nearest b1, a1; ` + "`steward backup list` lists them (or name `latest`)"},
		{"a delta named", BackupHint(refusal.New(kstorage.ErrNotFull, "backup d is a delta segment: name a full backup (the deltas after it are replayed)")),
			"backup d is a delta segment: name a full backup (the deltas after it are replayed); list them with `steward backup list`"},
		// A new member while a plan's downgrade is enabled.
		{"downgrade of a plan", DowngradeHint(fmt.Errorf("quorum is back, but replacing m2 failed: %w", refusal.New(membership.ErrDowngradeOfPlan, "refusing to replace m2: plan rollback-1 enabled etcd's downgrade to 3.5.35 and has not ended it yet, and etcd lets no member join until it ends; finish the plan"))),
			"quorum is back, but replacing m2 failed: refusing to replace m2: plan rollback-1 enabled etcd's downgrade to 3.5.35 and has not ended it yet, and etcd lets no member join until it ends; finish the plan (`steward plan resume`) first"},
		{"downgrade by hand", DowngradeHint(refusal.New(membership.ErrDowngradeInProgress, "refusing to add a member: ...; end it with `etcdctl downgrade cancel` (or finish the downgrade) first")),
			"refusing to add a member: ...; end it with `etcdctl downgrade cancel` (or finish the downgrade) first"},
		// A restore while members run.
		{"members run", StoppedHint(fmt.Errorf("restore: %w", refusal.New(restore.ErrMembersRunning, "refusing to restore while member m1 is running: stop the cluster first"))),
			"restore: refusing to restore while member m1 is running: stop the cluster first (`steward down`)"},
	} {
		if tc.got == nil || tc.got.Error() != tc.want {
			t.Errorf("%s: %v\nwant %s", tc.name, tc.got, tc.want)
		}
	}
}
