package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/kmigrate"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/recovery"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/pkg/upgrade"
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

// TestLibraryAdvice: the advice main adds to any command's error, for the
// errors whose libraries stopped naming commands, reads as the libraries'
// messages did, letter for letter; other errors pass unchanged.
func TestLibraryAdvice(t *testing.T) {
	attached := &cluster.Cluster{Spec: &spec.Cluster{Name: "kube",
		External: &spec.External{CAFile: "/etc/etcd/ca.crt", CertFile: "/etc/etcd/c.crt", KeyFile: "/etc/etcd/c.key", ClusterID: "feed"},
		Members:  []spec.Member{{Name: "cp-1", ClientURL: "https://127.0.0.1:2379"}}}}
	adopted := &cluster.Cluster{Spec: attached.Spec.Clone()}
	adopted.Spec.Members[0].Agent, adopted.Spec.Members[0].Adopted = spec.LocalAgent, &spec.Adopted{}
	boom := errors.New("context deadline exceeded")
	_, failedChecks := upgrade.Refusal([]upgrade.Check{
		{Name: upgrade.CheckHealthy, Message: "not every member is healthy: m2; fix them first"},
		{Name: upgrade.CheckVoters, Message: "learners wait for promotion: m4"},
		{Name: upgrade.CheckAlarms, Message: "alarms are raised: m1: NOSPACE"},
		{Name: upgrade.CheckDBSize, Overridable: true, Message: "the database is 90% of its quota"},
		{Name: upgrade.CheckBinaries, Message: "host h2: etcd 3.7.3 missing; host h3: another build; push etcd 3.7.3 to those hosts from this machine's store; replace their copy of etcd 3.7.3 with this machine's (theirs is kept aside)",
			Pushes: []upgrade.Push{{Version: "3.7.3", Hosts: []string{"h1", "h2"}, After: "push etcd 3.7.3 to those hosts from this machine's store"},
				{Version: "3.7.3", Hosts: []string{"h3"}, Replace: true, After: "replace their copy of etcd 3.7.3 with this machine's (theirs is kept aside)"}}},
		{Name: upgrade.CheckLeader, OK: true, Message: "leader m1, term 2"},
	}, false)
	if !errors.Is(failedChecks, upgrade.ErrOverridableChecks) {
		t.Errorf("failed checks with an overridable one: %v is not ErrOverridableChecks", failedChecks)
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"replace unfinished", fmt.Errorf("replace m2: %w", &membership.UnfinishedError{Member: "m2", Err: fmt.Errorf("start member m2: %w", boom)}),
			"replace m2: start member m2: context deadline exceeded (re-run `steward member replace m2` to continue)"},
		{"recovery: seed isolated", &recovery.RerunError{Err: fmt.Errorf("make m1 a cluster of one: %w", boom), After: "the restore is repeated"},
			"make m1 a cluster of one: context deadline exceeded (re-run `steward recover`: the restore is repeated)"},
		{"recovery: journal", &recovery.RerunError{Err: fmt.Errorf("m1 is a cluster of one, but the recovery journal was not written: %w", boom)},
			"m1 is a cluster of one, but the recovery journal was not written: context deadline exceeded (re-run `steward recover`)"},
		{"recovery: snapshot", &recovery.RerunError{Err: fmt.Errorf("seed m1 serves, but the fresh full snapshot failed: %w", boom), Before: "the other members were not added yet"},
			"seed m1 serves, but the fresh full snapshot failed: context deadline exceeded (the other members were not added yet: re-run `steward recover`)"},
		{"recovery: members not added, replaces inside", &recovery.RerunError{Unadded: []string{"m2", "m3"},
			Err: fmt.Errorf("the cluster is back (m1, backup b1; added []), but 2 members could not be added: %w", errors.Join(
				&membership.UnfinishedError{Member: "m2", Err: boom}, &membership.UnfinishedError{Member: "m3", Err: boom}))},
			"the cluster is back (m1, backup b1; added []), but 2 members could not be added: context deadline exceeded\ncontext deadline exceeded; once their hosts are fixed, re-run `steward recover` (or `steward member replace NAME` for each of [m2 m3])"},
		{"recovery under a plan", refusal.New(recovery.ErrPlanOpen, "refusing to recover: plan upgrade-1 is failed and stops members on purpose"),
			"refusing to recover: plan upgrade-1 is failed and stops members on purpose; resume it (`steward plan resume`) or abort it (`steward plan abort`) first"},
		{"recovery journal unreadable", refusal.New(recovery.ErrJournalUnreadable, "recovery journal /d/status/recovery.json is unreadable (unexpected end of JSON input): it records an unfinished recovery"),
			"recovery journal /d/status/recovery.json is unreadable (unexpected end of JSON input): it records an unfinished recovery; check the cluster with `steward status`, then remove the file and re-run `steward recover`"},
		{"never took over", fmt.Errorf("copy the spec for another coordinator: %w", &handover.SupersededError{Err: fmt.Errorf("%w: generation 2 is coordinated from h2:/d since 2026-01-01T00:00:00Z; this directory never took over", handover.ErrSuperseded)}),
			"copy the spec for another coordinator: another coordinator took over: generation 2 is coordinated from h2:/d since 2026-01-01T00:00:00Z; this directory never took over (`steward takeover`)"},
		{"superseded", &handover.SupersededError{Mine: 1, Err: fmt.Errorf("%w: generation 2 is coordinated from h2:/d since 2026-01-01T00:00:00Z, this directory holds generation 1; its plans are stale and it acts no more", handover.ErrSuperseded)},
			"another coordinator took over: generation 2 is coordinated from h2:/d since 2026-01-01T00:00:00Z, this directory holds generation 1; its plans are stale and it acts no more (`steward takeover` here takes over again)"},
		{"rotation in progress", fmt.Errorf("renew certificates: %w", pki.ErrRotationInProgress),
			"renew certificates: a CA rotation is in progress (ca-next.crt exists): `steward plan resume` finishes it, then certificates are issued and renewed again"},
		{"operator's certificates", attached.RequireOwnCerts("run `steward certs renew`"),
			"cannot run `steward certs renew`: the certificates of cluster kube are the operator's (it was attached): Steward does not hold their CA's key; renew them with that CA (`steward certs list` shows their expiry, and status warns before they expire)"},
		{"operator's certificates, every member adopted", adopted.RequireOwnCerts("run `steward certs renew`"),
			"cannot run `steward certs renew`: the certificates of cluster kube are the operator's (it was attached): Steward does not hold their CA's key; renew them with that CA (`steward certs list` shows their expiry, and status warns before they expire), or hand Steward that CA's certificate and key (`steward certs take-over`)"},
		{"adopt's health gate", refusal.New(adopt.ErrUnhealthy, "not every member of cluster kube is healthy (m2: unhealthy): adopt one only while all are"),
			"not every member of cluster kube is healthy (m2: unhealthy): adopt one only while all are (`steward status`)"},
		{"a member answers for another", fmt.Errorf("wait for m2: %w", status.CheckAnswer("m2", 2, "https://127.0.0.1:2379", &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{MemberId: 1}})),
			"wait for m2: another member answers on the URL: member ID 1 answers on https://127.0.0.1:2379, not m2 (ID 2): is m2 running, and is its URL another member's (an alias such as localhost for 127.0.0.1, a port taken by another member)? Check `steward status` and the spec's URLs"},
		{"a member answers for another, words after it", errors.Join(status.CheckAnswer("m2", 2, "u", &clientv3.StatusResponse{Header: &etcdserverpb.ResponseHeader{MemberId: 1}}), boom),
			"another member answers on the URL: member ID 1 answers on u, not m2 (ID 2): is m2 running, and is its URL another member's (an alias such as localhost for 127.0.0.1, a port taken by another member)? Check `steward status` and the spec's URLs\ncontext deadline exceeded"},
		{"mixed versions", fmt.Errorf("plan: %w", refusal.New(upgrade.ErrMixedVersions, "members run different etcd versions (3.5.35 on m1; 3.6.16 on m2,m3): resume or roll back the last plan first")),
			"plan: members run different etcd versions (3.5.35 on m1; 3.6.16 on m2,m3): resume or roll back the last plan first (`steward plan show`)"},
		{"pre-flight checks", fmt.Errorf("`steward upgrade apply` would refuse this plan: %w", failedChecks),
			"`steward upgrade apply` would refuse this plan: pre-flight checks failed; nothing was changed:\n" +
				"  members-healthy: not every member is healthy: m2; fix them first (`steward status`)\n" +
				"  no-learners: learners wait for promotion: m4; finish `steward member add` (or remove them) first\n" +
				"  no-alarms: alarms are raised: m1: NOSPACE; clear them with `steward alarm disarm`\n" +
				"  db-size: the database is 90% of its quota (overridable)\n" +
				"  binaries: host h2: etcd 3.7.3 missing; host h3: another build; push etcd 3.7.3 to those hosts from this machine's store with `steward binaries push 3.7.3 --host h1 --host h2`; replace their copy of etcd 3.7.3 with this machine's (theirs is kept aside) with `steward binaries push 3.7.3 --host h3 --force`"},
		{"migration lock", fmt.Errorf("/d/migrate.db: %w", kmigrate.ErrStateLocked),
			"/d/migrate.db: another steward migrate storage is running with this Steward directory"},
		{"migration lock alone", kmigrate.ErrStateLocked, "another steward migrate storage is running with this Steward directory"},
		// Unreachable agents: what to check after each.
		{"an unreachable agent", fmt.Errorf("member etcd-1: %w", unreachable("cp-1", "10.0.0.11")),
			"member etcd-1: agent cp-1 on host 10.0.0.11 unreachable at https://10.0.0.11:2378: dial tcp 10.0.0.11:2378: connect: connection refused; check that `steward agent` runs there and that this machine reaches that address"},
		{"two unreachable agents", fmt.Errorf("push: %w", errors.Join(fmt.Errorf("host cp-1: %w", unreachable("cp-1", "10.0.0.11")), fmt.Errorf("host cp-3: %w", unreachable("cp-3", "10.0.0.13")))),
			"push: host cp-1: agent cp-1 on host 10.0.0.11 unreachable at https://10.0.0.11:2378: dial tcp 10.0.0.11:2378: connect: connection refused; check that `steward agent` runs there and that this machine reaches that address\n" +
				"host cp-3: agent cp-3 on host 10.0.0.13 unreachable at https://10.0.0.13:2378: dial tcp 10.0.0.13:2378: connect: connection refused; check that `steward agent` runs there and that this machine reaches that address"},
		// The renewal loop's, advised in the loop's process.
		{"rotation not running", refusal.New(certs.ErrRotationNotRunning, "renewals wait for a CA rotation that is not running (plan ca-rotation-1 is aborted; ca-next.crt is still there)"),
			"renewals wait for a CA rotation that is not running (plan ca-rotation-1 is aborted; ca-next.crt is still there): run `steward certs rotate-ca` to finish it"},
		{"a host cannot sign", certs.ErrHostCannotSign,
			"this host's certificates are due for renewal and its directory holds no CA key: the coordinator renews them through this agent's API (its renewal loop or `steward certs renew`); check that it reaches this host (docs/certificates.md)"},
		{"leaves at the CA's expiry", refusal.New(certs.ErrCALimit, `the CA "c1-ca" expires at 2026-12-08T14:47:55Z: [server peer client] end with it and cannot be renewed to a later expiry, so they are not reissued; rotate the CA before it expires`),
			`the CA "c1-ca" expires at 2026-12-08T14:47:55Z: [server peer client] end with it and cannot be renewed to a later expiry, so they are not reissued; rotate the CA before it expires with ` + "`steward certs rotate-ca`"},
		// The agent's, advised in the agent process (agent.Options.Advise).
		{"invalid data dir", fmt.Errorf("start member etcd-1: %w", &agent.DataDirError{Member: "etcd-1", Msg: "refusing to start: data dir /d/members/etcd-1/data is empty, but etcd 3.6.16 was started on it (last at 2026-11-27T21:00:00Z, by its version record): its data was lost; rebuild it"}),
			"start member etcd-1: refusing to start: data dir /d/members/etcd-1/data is empty, but etcd 3.6.16 was started on it (last at 2026-11-27T21:00:00Z, by its version record): its data was lost; rebuild it with `steward member replace etcd-1` (or `steward recover` when a majority is lost)"},
		{"no host certificates", fmt.Errorf("PUT /v1/certs/server: %w", agent.ErrNoHostCerts),
			"PUT /v1/certs/server: this agent holds no host certificates (it runs on the coordinator's machine, whose directory renews its own: use `steward certs renew` there)"},
		{"spec to an agent that never joined", agent.ErrNotJoined,
			"only an agent that joined a cluster (steward agent --join) keeps a copy of the spec"},
		{"another error", boom, "context deadline exceeded"},
	} {
		if got := LibraryAdvice(tc.err); got == nil || got.Error() != tc.want || !errors.Is(got, tc.err) {
			t.Errorf("%s: %v\nwant %s", tc.name, got, tc.want)
		}
	}
	if LibraryAdvice(nil) != nil {
		t.Error("LibraryAdvice(nil) != nil")
	}
	// Once only, and before the advice of a failed plan step (PlanHint),
	// whatever main adds after.
	step := &plan.StepError{Plan: "ca-rotation-1", Index: 2, Description: "push the trust bundle",
		Err: fmt.Errorf("push the trust bundle: refusing: %w", &handover.SupersededError{Mine: 1, Err: fmt.Errorf("%w: its plans are stale", handover.ErrSuperseded)})}
	got := LibraryAdvice(LibraryAdvice(PlanHint(step)))
	want := "step 3 (push the trust bundle) failed: push the trust bundle: refusing: another coordinator took over: its plans are stale (`steward takeover` here takes over again); fix the cause, then run `steward plan resume` (or `steward plan abort`)"
	if got.Error() != want {
		t.Errorf("a failed step's error: %v\nwant %s", got, want)
	}
}

// unreachable is the error of agent name on host addr that refused the
// connection.
func unreachable(name, addr string) error {
	return &agentapi.UnreachableError{Agent: name, Host: addr, Address: "https://" + addr + ":2378",
		Err: errors.New("dial tcp " + addr + ":2378: connect: connection refused")}
}

// TestConditionAdvice: `steward status` shows the plan and renewal
// conditions with the commands that end them, letter for letter as the
// library once wrote them; conditions without a fix keep their message.
func TestConditionAdvice(t *testing.T) {
	st := &status.Status{Conditions: []status.Condition{
		{Type: "UpgradeInProgress", Reason: "Failed", Fix: status.FixPlanFailed, Message: "upgrade plan upgrade-1 failed: step 2: boom; fix the cause"},
		{Type: "AdoptionInProgress", Reason: "Interrupted", Fix: status.FixPlanInterrupted, Message: "adopt plan adopt-1 was interrupted; no process runs it"},
		{Type: "CertificateRenewal", Reason: "NotRunning", Fix: status.FixRenewerStart, Message: "no certificate renewal runs for this directory: the hosts' certificates are not renewed"},
		{Type: "CertificateRenewal", Reason: "Stopped", Fix: status.FixAgentStart, Message: "the certificate renewal (pid 4) stopped 1m0s ago; it runs in this machine's agent: start the agent"},
		{Type: "Ready", Reason: "Quorate", Message: "3 of 3 members healthy"},
	}}
	ConditionAdvice(st)
	for i, want := range []string{
		"upgrade plan upgrade-1 failed: step 2: boom; fix the cause, then `steward plan resume` or `steward plan abort`",
		"adopt plan adopt-1 was interrupted; no process runs it: `steward plan resume`",
		"no certificate renewal runs for this directory: the hosts' certificates are not renewed; `steward up` restarts it (or its systemd unit, deploy/systemd/steward-certrenew.service, does)",
		"the certificate renewal (pid 4) stopped 1m0s ago; it runs in this machine's agent: start the agent (`steward up`, or its systemd unit)",
		"3 of 3 members healthy",
	} {
		if got := st.Conditions[i].Message; got != want {
			t.Errorf("%s: %s\nwant %s", st.Conditions[i].Type, got, want)
		}
	}
}

// TestSpecProblemAdvice: the validation problems a command ends name it
// in their own line, each of them, as the library once wrote them; the
// other problems are left as they are.
func TestSpecProblemAdvice(t *testing.T) {
	s := &spec.Cluster{Name: "kube", External: &spec.External{CAFile: "/etc/etcd/ca.crt", ClusterID: "feed"},
		Members: []spec.Member{{Name: "cp-1", ClientURL: "https://127.0.0.1:2379", Agent: "local"}}}
	_, err := s.Validate(spec.ValidateOptions{})
	if err == nil {
		t.Fatal("no validation problems")
	}
	got := LibraryAdvice(fmt.Errorf("cluster.yaml: %w", err)).Error()
	for _, want := range []string{
		"\nexternal.certFile is empty: an attached cluster is reached with the operator's own certificate (leave all three empty only after `steward certs take-over`)\n",
		"\nexternal.keyFile is empty: an attached cluster is reached with the operator's own certificate (leave all three empty only after `steward certs take-over`)\n",
		"member cp-1: agent \"local\": the members of an attached cluster run under no agent until `steward adopt` hands them to one (leave agent empty)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("advised problems:\n%s\nwant a line %q", got, want)
		}
	}
	if strings.Contains(got, "the certificate take-over") || strings.Contains(got, "until adopt hands") || !strings.HasPrefix(got, "cluster.yaml: ") {
		t.Errorf("advised problems:\n%s", got)
	}
	if !errors.Is(LibraryAdvice(err), spec.ErrOperatorFileEmpty) {
		t.Error("the advised error is no longer of its kind")
	}
}

// TestProgressHints: the progress lines that name a step (progress.Hint)
// read, through a command's progress, as the libraries once wrote them,
// with the command; through any other Func, with the plain words. One is
// written by its library (bootstrap.Init without S3), the others as the
// libraries call Say.
func TestProgressHints(t *testing.T) {
	var b strings.Builder
	dir := filepath.Join(t.TempDir(), "steward")
	o := bootstrap.InitOptions{HostsOptions: spec.HostsOptions{Hosts: []spec.Host{{Name: "h1", Address: "10.0.0.11"}}}}
	if _, _, err := bootstrap.Init(t.Context(), dir, o, Progress(&b)); err != nil {
		t.Fatal(err)
	}
	if want := "continuous backups are off: no S3 store was given (set backup.s3 in " + filepath.Join(dir, spec.FileName) + " before `steward up`, see docs/backup.md)\n"; !strings.HasSuffix(b.String(), want) {
		t.Errorf("init's last line:\n%s\nwant %s", b.String(), want)
	}
	for _, tc := range []struct {
		format     string
		args       []any
		want, bare string
	}{
		{"warning: %v; continuous backups do not run on those hosts until the next %v", []any{"host h2: unreachable", progress.Hint{Kind: bootstrap.HintUp, Plain: "start of the cluster"}},
			"warning: host h2: unreachable; continuous backups do not run on those hosts until the next `steward up`",
			"warning: host h2: unreachable; continuous backups do not run on those hosts until the next start of the cluster"},
		{"note: member %s runs with an older config; %v applies the spec", []any{"m1", progress.Hint{Kind: bootstrap.HintRestartMember, Args: []string{"m1"}, Plain: "stopping and starting it"}},
			"note: member m1 runs with an older config; `steward member stop m1` then `start` applies the spec",
			"note: member m1 runs with an older config; stopping and starting it applies the spec"},
		{"note: no CA key in %s: this coordinator cannot add hosts (%v)", []any{"/pki", progress.Hint{Kind: bootstrap.HintAddHost, Plain: "no host add"}},
			"note: no CA key in /pki: this coordinator cannot add hosts (`steward host add`)",
			"note: no CA key in /pki: this coordinator cannot add hosts (no host add)"},
		{"restored 3 members ...; %v", []any{progress.Hint{Kind: restore.HintStartCluster, Plain: "start the cluster"}},
			"restored 3 members ...; start the cluster with `steward up`", "restored 3 members ...; start the cluster"},
		// An error in a line gets the advice it gets when main prints it.
		{"warning: %v", []any{refusal.New(upgrade.ErrMixedVersions, "members run different etcd versions (...)")},
			"warning: members run different etcd versions (...) (`steward plan show`)", "warning: members run different etcd versions (...)"},
	} {
		var got, bare strings.Builder
		Progress(&got).Say(tc.format, tc.args...)
		progress.To(&bare).Say(tc.format, tc.args...)
		if got.String() != tc.want+"\n" || bare.String() != tc.bare+"\n" {
			t.Errorf("%q:\n%s%s\nwant\n%s\n%s", tc.format, got.String(), bare.String(), tc.want, tc.bare)
		}
	}
}

// TestBinaryProblemAdvice: a stored binary's problem (binaries.Problem)
// reads, wherever a command shows it, as the library once wrote it, with
// the steward command that fixes it: in any command's error and the
// agent's (a member's start, a tool, the spec's versions: LibraryAdvice),
// in the upgrade pre-flight's table and refusal, for this machine's store
// and a host's (CheckMessage, from the agent's BinaryCheck).
func TestBinaryProblemAdvice(t *testing.T) {
	store := t.TempDir()
	const v = "3.5.98"
	dir := filepath.Join(store, binaries.DirPrefix+v)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	etcd, etcdctl := filepath.Join(dir, "etcd"), filepath.Join(dir, "etcdctl")
	body := []byte("#!/bin/sh\n")
	for _, p := range []string{etcd, etcdctl} {
		if err := os.WriteFile(p, body, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	sum := sha256.Sum256(body)
	got := hex.EncodeToString(sum[:])
	reimport := "import etcd " + v + " again from its release tarball or build directory: `steward binaries import --force --store " + store +
		" --version " + v + " SOURCE` (--force sets the unrecorded copy aside), or `make etcd-binaries` for the test store"
	noManifest := binaries.CheckRecorded(etcd)
	want := strings.Repeat("0", 64)
	manifest := `{"version":"` + v + `","files":{"etcd":"` + want + `"}}`
	if err := os.WriteFile(filepath.Join(dir, binaries.ManifestName), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	unlisted, changed := binaries.CheckRecorded(etcdctl), binaries.CheckRecorded(etcd)
	_, missing := binaries.Open(store).Resolve("3.99.0")
	notInStore := "etcd 3.99.0 is not in the binary store " + store + " and is not the embedded version " + binaries.EmbeddedVersion() +
		`: import it with "steward binaries import": etcd version not found`
	s := &spec.Cluster{Name: "kube", Token: "t", Version: "3.99.0", Members: []spec.Member{{Name: "m1", Version: "3.99.0"}}}
	_, invalid := s.Validate(spec.ValidateOptions{KnownVersion: func(v string) error { _, err := binaries.Open(store).Resolve(v); return err }})
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"a member's start, no manifest (the agent's last error)", fmt.Errorf("refusing to start etcd %s: %w", v, noManifest),
			"refusing to start etcd " + v + ": " + etcd + ": stored binary has no SHA-256 recorded at import: " + dir + " has no manifest.json; " + reimport},
		{"a tool the manifest does not list", unlisted,
			etcdctl + ": stored binary has no SHA-256 recorded at import: the manifest of " + dir + " lists no SHA-256 for etcdctl (added after the import?); " + reimport},
		{"a changed binary", changed,
			etcd + ": stored binary does not match the SHA-256 recorded at import: its SHA-256 is " + got + ", the manifest says " + want +
				"; import the version again (`steward binaries import`) or restore the file"},
		{"a version not in the store (an agent's swap)", fmt.Errorf("swap member m1 to etcd 3.99.0: %w", missing), "swap member m1 to etcd 3.99.0: " + notInStore},
	} {
		if got := LibraryAdvice(tc.err); got.Error() != tc.want || !errors.Is(got, tc.err) {
			t.Errorf("%s: %v\nwant %s", tc.name, got, tc.want)
		}
		if _, ok := binaries.ProblemOf(tc.err); !ok || strings.Contains(tc.err.Error(), "steward binaries") {
			t.Errorf("%s: the library's error %q is no problem of its kind, or names a command", tc.name, tc.err)
		}
	}
	// The spec's version and a member's: each line advised.
	if got := LibraryAdvice(fmt.Errorf("invalid cluster spec:\n%w", invalid)).Error(); !strings.Contains(got, "\nversion 3.99.0: "+notInStore+"\n") ||
		!strings.Contains(got, "\nmember m1: version 3.99.0: "+notInStore+"\n") {
		t.Errorf("advised spec problems:\n%s", got)
	}

	// The pre-flight: this machine's store and a host's, as the agent's
	// BinaryCheck carries it (kind, version, store, text).
	mp, _ := binaries.ProblemOf(missing)
	hostStore := "/var/lib/steward/binaries"
	host := memberrt.BinaryCheck{Version: "3.99.0", Store: hostStore, ProblemKind: binaries.KindNotInStore,
		Problem: "etcd 3.99.0 is not in the binary store " + hostStore + " and is not the embedded version 3.6.16: import it: etcd version not found"}
	hp := binaries.Problem{Kind: host.ProblemKind, Version: host.Version, Store: host.Store, Message: host.Problem}
	cp, _ := binaries.ProblemOf(unlisted)
	checks := []upgrade.Check{
		{Name: upgrade.CheckBinaries, Message: mp.Message + "; host h2: " + host.Problem + "; push etcd 3.99.0 to those hosts from this machine's store",
			Binaries: []binaries.Problem{mp, hp}, Pushes: []upgrade.Push{{Version: "3.99.0", Hosts: []string{"h2"}, After: "push etcd 3.99.0 to those hosts from this machine's store"}}},
		{Name: upgrade.CheckV2Store, Message: cp.Message + ", so etcd's v2 store check cannot run: import etcd " + v + " with its etcdutl", Binaries: []binaries.Problem{cp}},
	}
	wantChecks := []string{
		notInStore + "; host h2: etcd 3.99.0 is not in the binary store " + hostStore + ` and is not the embedded version 3.6.16: import it with "steward binaries import": etcd version not found` +
			"; push etcd 3.99.0 to those hosts from this machine's store with `steward binaries push 3.99.0 --host h2`",
		LibraryAdvice(unlisted).Error() + ", so etcd's v2 store check cannot run: import etcd " + v + " with its etcdutl",
	}
	for i, ch := range checks {
		if got := CheckMessage(ch); got != wantChecks[i] {
			t.Errorf("check %s: %s\nwant %s", ch.Name, got, wantChecks[i])
		}
	}
	_, refused := upgrade.Refusal(checks, false)
	if got, want := LibraryAdvice(refused).Error(), "pre-flight checks failed; nothing was changed:\n  binaries: "+wantChecks[0]+"\n  v2store: "+wantChecks[1]; got != want {
		t.Errorf("refusal:\n%s\nwant\n%s", got, want)
	}
}
