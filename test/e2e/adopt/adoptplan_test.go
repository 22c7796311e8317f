package adopt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// attachForAdopt attaches f with continuous backups (the local agent runs)
// and points the spec's binary store at the test store, from which the
// agent runs an adopted member's version.
func attachForAdopt(t *testing.T, f *harness.ForeignCluster) *harness.Env {
	t.Helper()
	e := harness.New(t)
	e.MustRun(append(attachArgs(f), "--continuous")...)
	s := e.Spec()
	s.BinaryStore = e.Store
	if err := s.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	return e
}

// memberID returns the member list and the ID of member name in it.
func memberID(t *testing.T, list func(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error), name string) (*clientv3.MemberListResponse, uint64) {
	t.Helper()
	resp, err := list(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range resp.Members {
		if m.Name == name {
			return resp, m.ID
		}
	}
	t.Fatalf("no member %s in %v", name, resp.Members)
	return nil, 0
}

// specSnapshot returns a check that a refused adopt changed nothing: the
// spec as it is now, and no plan.
func specSnapshot(t *testing.T, e *harness.Env) (unchanged func(what string)) {
	t.Helper()
	before, err := os.ReadFile(filepath.Join(e.Dir, spec.FileName))
	if err != nil {
		t.Fatal(err)
	}
	return func(what string) {
		t.Helper()
		if after, err := os.ReadFile(filepath.Join(e.Dir, spec.FileName)); err != nil || string(after) != string(before) {
			t.Errorf("%s changed the spec (%v)", what, err)
		}
		if _, err := plan.OpenStore(e.Dir).Latest(); !errors.Is(err, plan.ErrNoPlan) {
			t.Errorf("%s left a plan: %v", what, err)
		}
	}
}

// requireGivenBack: after `adopt --undo name` (how, for the messages: "the
// undo", "the static pod's undo"), the spec has name external again, the
// cluster is healthy with name external, the adopt plan planID is rolled
// back, and name keeps its member ID id. It returns the member list.
func requireGivenBack(t *testing.T, e *harness.Env, list func(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error), name string, id uint64, planID, how string) *clientv3.MemberListResponse {
	t.Helper()
	if m, _ := e.Spec().Member(name); m.Agent != "" || m.Adopted != nil || m.DataDir != "" {
		t.Errorf("after %s the spec has %s with agent %q, data dir %q, adopted %v; want it external", how, name, m.Agent, m.DataDir, m.Adopted != nil)
	}
	e.WaitStatus(30*time.Second, name+" healthy and external after "+how, func(st *status.Status) bool {
		n, _ := st.Member(name)
		return harness.Healthy(st) && n.Process == status.External
	})
	if was, err := plan.OpenStore(e.Dir).Get(planID); err != nil || was.State != plan.RolledBack {
		t.Errorf("the adopt plan after %s: %v, %v; want rolled back", how, was, err)
	}
	after, err := list(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(after.Members, func(m *etcdserverpb.Member) bool { return m.Name == name && m.ID == id }) {
		t.Errorf("after %s member %s no longer has ID %x: %v", how, name, id, after.Members)
	}
	return after
}

// TestAdopt: a three-member etcd 3.5 cluster the test started itself
// (plain flags, its own CA), attached with --continuous; an adopt while
// infra2 is down is refused and changes nothing; an adoption of infra1
// killed halfway (old process stopped, spec not yet written) is undone
// (the old command line runs it again); then member
// infra1 adopted by --pid under a writer: the adopt plan is done, the old
// process is gone, the member runs under the local agent with the same
// member ID and cluster ID, the spec records it adopted while the other
// two stay external, the agent restarts it after kill -9, and no
// acknowledged write is lost. Then `adopt --undo infra1` gives it back:
// the old command line runs it again outside Steward (same member ID),
// the spec has it external, the adopt plan is rolled back, and the writer
// still writes. Then infra2, adopted through a static pod manifest, is
// given back (undoStaticPod): the manifest moved back where the kubelet
// reads it, the member run again from it.
func TestAdopt(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignCluster(t, adoptVersion, 3)
	fcli := f.MustClient()
	e := attachForAdopt(t, f)
	old := f.Members[0]
	before, id := memberID(t, fcli.MemberList, old.Name)
	w := harness.UnderWrites(t, fcli, workload.Options{Prefix: "/adopt", Interval: 10 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{Acked: 100})

	// An adopt while a member is down: one refusal, nothing changed.
	unchanged := specSnapshot(t, e)
	f.Members[1].Stop()
	e.WaitStatus(30*time.Second, f.Members[1].Name+" unhealthy", func(st *status.Status) bool {
		n, _ := st.Member(f.Members[1].Name)
		return !n.Healthy
	})
	msg := e.MustFail("adopt", "--pid", strconv.Itoa(old.PID()))
	if !strings.Contains(msg, "not every member of cluster") || !strings.Contains(msg, f.Members[1].Name) {
		t.Errorf("adopt while %s is down: %s", f.Members[1].Name, msg)
	}
	unchanged("the refused adopt")
	if !old.Running() {
		t.Errorf("the refused adopt stopped %s", old.Name)
	}
	if err := f.Members[1].Start(); err != nil {
		t.Fatal(err)
	}
	f.WaitReady()

	// An adoption that dies halfway (after the old process stopped, before
	// the member is recorded in the spec), undone: the member runs again
	// with its old command line.
	_, se, err := e.RunEnv([]string{"STEWARD_CRASHPOINT=plan-step-before:3"}, "adopt", "--pid", strconv.Itoa(old.PID()))
	if err == nil || !strings.Contains(se, "crashpoint: plan-step-before:3") {
		t.Fatalf("adopt with a crash point before the record step: %v\n%s", err, se)
	}
	if old.Running() {
		t.Fatalf("the adoption died before its record step, yet the old process of %s runs", old.Name)
	}
	// The interrupted adoption is reported by its own condition, not as an
	// upgrade in progress; plan show names its member (its payload).
	half := harness.LatestPlan(t, e)
	halfSt := e.Status()
	if c := harness.Cond(halfSt, plan.CondAdoptionInProgress); c.Status != "True" || c.Reason != "Interrupted" || !strings.Contains(c.Message, "adopt plan "+half.ID+" (member "+old.Name+")") {
		t.Errorf("AdoptionInProgress during the interrupted adoption: %+v", c)
	}
	if c := harness.Cond(halfSt, plan.CondUpgradeInProgress); c.Status != "False" || c.Reason != "NoPlan" {
		t.Errorf("UpgradeInProgress during an adoption: %+v, want False/NoPlan", c)
	}
	if out := e.MustRun("plan", "show"); !strings.HasPrefix(out, "plan "+half.ID+": adopt of member "+old.Name+", running\n") {
		t.Errorf("plan show of the interrupted adoption:\n%s", out)
	}
	e.MustRun("adopt", "--undo", old.Name)
	oldPID, err := adopt.FindProcess(old.DataDir, old.Name)
	if err != nil {
		t.Fatalf("after undoing the adoption halfway no process runs %s: %v", old.Name, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(oldPID, syscall.SIGKILL) })
	if args := proc.Cmdline(oldPID); !slices.Equal(args, old.Cmdline) {
		t.Errorf("%s restarted with %q, want its old command line %q", old.Name, args, old.Cmdline)
	}
	if m, _ := e.Spec().Member(old.Name); m.Agent != "" || m.Adopted != nil {
		t.Errorf("after undoing the adoption halfway the spec has %s with agent %q, adopted %v", old.Name, m.Agent, m.Adopted != nil)
	}
	e.WaitStatus(30*time.Second, "every member healthy after undoing the adoption halfway", harness.Healthy)

	out := e.MustRun("adopt", "--pid", strconv.Itoa(oldPID), "-o", "json")
	var p plan.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("adopt -o json: %v\n%s", err, out)
	}
	if p.Kind != plan.KindAdopt || p.State != plan.Done {
		t.Fatalf("adopt plan %s is %s %s, want adopt done:\n%s", p.ID, p.Kind, p.State, out)
	}
	if proc.Alive(oldPID) {
		t.Errorf("the old process %d of %s still runs after the adoption", oldPID, old.Name)
	}
	after, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.ClusterId != before.Header.ClusterId || len(after.Members) != 3 {
		t.Errorf("after the adoption: cluster %x with %d members, want %x with 3", after.Header.ClusterId, len(after.Members), before.Header.ClusterId)
	}
	found := false
	for _, m := range after.Members {
		found = found || m.Name == old.Name && m.ID == id
	}
	if !found {
		t.Errorf("member %s no longer has ID %x: %v", old.Name, id, after.Members)
	}
	sp := e.Spec()
	for _, m := range sp.Members {
		if adopted := m.Name == old.Name; m.IsAdopted() != adopted || adopted && m.DataDir != old.DataDir {
			t.Errorf("spec member %s: agent %q, data dir %q, adopted %v; want adopted only %s with data dir %s", m.Name, m.Agent, m.DataDir, m.IsAdopted(), old.Name, old.DataDir)
		}
	}
	if sp.External == nil {
		t.Errorf("the spec lost its external block with two members still external")
	}
	st := e.WaitStatus(30*time.Second, old.Name+" running under the agent", func(st *status.Status) bool {
		ms, _ := st.Member(old.Name)
		return harness.Healthy(st) && ms.PID != 0
	})
	ms, _ := st.Member(old.Name)
	if ms.PID == oldPID {
		t.Fatalf("%s runs as the old pid %d", old.Name, oldPID)
	}
	if err := syscall.Kill(ms.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.WaitStatus(60*time.Second, "the agent to restart "+old.Name+" after kill -9", func(st *status.Status) bool {
		n, _ := st.Member(old.Name)
		return harness.Healthy(st) && n.PID != 0 && n.PID != ms.PID
	})
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the restart", w.AckedAbove(w.Acked()+100))

	// Undo: the member runs again as before, outside Steward.
	out = e.MustRun("adopt", "--undo", old.Name, "-o", "json")
	var u plan.Plan
	if err := json.Unmarshal([]byte(out), &u); err != nil {
		t.Fatalf("adopt --undo -o json: %v\n%s", err, out)
	}
	if u.Kind != plan.KindAdoptUndo || u.State != plan.Done || u.Of != p.ID {
		t.Fatalf("undo plan %s is %s %s of %q, want adopt-undo done of %s:\n%s", u.ID, u.Kind, u.State, u.Of, p.ID, out)
	}
	back, err := adopt.FindProcess(old.DataDir, old.Name)
	if err != nil {
		t.Fatalf("after the undo no process runs %s: %v", old.Name, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(back, syscall.SIGKILL) }) // the test's, as the old one was
	if args := proc.Cmdline(back); !slices.Equal(args, old.Cmdline) {
		t.Errorf("%s restarted with %q, want its old command line %q", old.Name, args, old.Cmdline)
	}
	requireGivenBack(t, e, fcli.MemberList, old.Name, id, p.ID, "the undo")
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the undo", w.AckedAbove(w.Acked()+100))
	undoStaticPod(t, e, f, fcli.MemberList)
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the static pod's undo", w.AckedAbove(w.Acked()+100))
	res := w.Finish(t)
	t.Logf("adopted %s (member %x) under %d acknowledged writes", old.Name, id, len(res.Acked))
}

// TestAdoptAll: every member of an attached etcd 3.5 cluster adopted one
// after the other under a writer, infra1 and infra3 by --pid, infra2 by a
// kubeadm-style static pod manifest describing it (moved aside, kept in
// the Steward directory); the spec then has every member
// adopted (the cluster Steward-run), the cluster ID unchanged; then
// `certs take-over` with the operator's CA (takeOverCerts: bad inputs
// refused, then every member serving Steward's certificates of that CA,
// renewable); `upgrade apply --to 3.7.3` (two hops) runs on it: every
// member reports 3.7.3 with its member ID; `rollback` returns every member
// to 3.5 with its ID; and
// `member replace` rebuilds one member;
// no acknowledged write is lost throughout. Then `steward recover` after
// every member stopped and two lost their WAL: reseeded from the third,
// the keyspace of before, the operator's certificates still in use; then
// recover's restore action after every WAL is lost (restoreAdopted).
func TestAdoptAll(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignCluster(t, adoptVersion, 3)
	fcli := f.MustClient()
	e := attachForAdopt(t, f)
	before, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	w := harness.UnderWrites(t, fcli, workload.Options{Prefix: "/adoptall", Interval: 10 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{})
	var manifest string
	for i, m := range f.Members {
		if i == 1 {
			// A static pod: the test started the process (no kubelet
			// here); adopt finds it by data dir and name.
			manifest = foreignManifest(t, f, m)
			e.MustRun("adopt", "--manifest", manifest)
		} else {
			e.MustRun("adopt", "--pid", strconv.Itoa(m.PID()))
		}
		if m.Running() {
			t.Errorf("the old process of %s still runs after its adoption", m.Name)
		}
	}
	if _, err := os.Stat(manifest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the static pod manifest %s is still where the kubelet reads it (%v)", manifest, err)
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "adopted", f.Members[1].Name, "etcd.yaml")); err != nil {
		t.Errorf("the static pod manifest was not kept for undo: %v", err)
	}
	if sp := e.Spec(); !sp.AllAdopted() {
		t.Errorf("after adopting every member the spec has not every member adopted: %+v", sp.Members)
	}
	e.WaitStatus(30*time.Second, "every member healthy under the agent", healthyUnderAgent)
	after, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.ClusterId != before.Header.ClusterId {
		t.Errorf("cluster ID %x after adopting every member, want %x", after.Header.ClusterId, before.Header.ClusterId)
	}
	// Adopted, the members still use the operator's certificates, until
	// Steward takes over issuing them with the operator's CA.
	refuseOperatorCerts(t, e)
	t0 := time.Now()
	takeOverCerts(t, e, f, (*etcdserverpb.MemberListResponse)(before))
	t.Logf("certificate take-over with its checks and renewal: %s", time.Since(t0).Round(time.Second))
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the take-over", w.AckedAbove(w.Acked()+100))

	// Two hops (3.5 to 3.6 to 3.7), then back.
	t0 = time.Now()
	e.MustRun("upgrade", "apply", "--to", adoptUpgradeTo)
	st := e.WaitStatus(30*time.Second, "every member on "+adoptUpgradeTo, func(st *status.Status) bool {
		for _, m := range st.Members {
			if m.Version != adoptUpgradeTo {
				return false
			}
		}
		return harness.Healthy(st)
	})
	t.Logf("upgrade to %s: %s", adoptUpgradeTo, time.Since(t0).Round(time.Second))
	if sp := e.Spec(); sp.Version != adoptUpgradeTo || !sp.AllAdopted() {
		t.Errorf("after the upgrade the spec has version %s, every member adopted %v", sp.Version, sp.AllAdopted())
	}
	upgraded, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range before.Members {
		if !slices.ContainsFunc(upgraded.Members, func(u *etcdserverpb.Member) bool { return u.ID == m.ID && u.Name == m.Name }) {
			t.Errorf("member %s (%x) is gone after the upgrade: %v (status %+v)", m.Name, m.ID, upgraded.Members, st.Members)
		}
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the upgrade", w.AckedAbove(w.Acked()+100))
	if sp := e.Spec(); !sp.AllAdopted() || sp.OperatorCerts() {
		t.Errorf("after the upgrade: every member adopted %v, the operator's certificates named again %v", sp.AllAdopted(), sp.OperatorCerts())
	}

	// The rest of the lifecycle on the adopted cluster: a rollback to the
	// version it ran before, then a member rebuilt by replace (a new data
	// dir, the same name, URLs and the operator's certificates).
	t0 = time.Now()
	e.MustRun("rollback")
	e.WaitStatus(30*time.Second, "every member back on "+adoptVersion, func(st *status.Status) bool {
		for _, m := range st.Members {
			if m.Version != adoptVersion {
				return false
			}
		}
		return harness.Healthy(st)
	})
	t.Logf("rollback to %s: %s", adoptVersion, time.Since(t0).Round(time.Second))
	rolled, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range before.Members {
		if !slices.ContainsFunc(rolled.Members, func(u *etcdserverpb.Member) bool { return u.ID == m.ID && u.Name == m.Name }) {
			t.Errorf("member %s (%x) is gone after the rollback: %v", m.Name, m.ID, rolled.Members)
		}
	}
	replaced := f.Members[2].Name
	e.MustRun("member", "replace", replaced)
	e.WaitStatus(60*time.Second, replaced+" replaced, a voting member, every member healthy", func(st *status.Status) bool {
		m, ok := st.Member(replaced)
		return ok && m.Role != "learner" && harness.Healthy(st)
	})
	if ms := e.Spec(); !ms.AllAdopted() {
		t.Errorf("after replace the spec no longer has every member adopted: %+v", ms.Members)
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the replace", w.AckedAbove(w.Acked()+100))
	w.Finish(t)

	// Disaster recovery on the adopted cluster: a backup taken, every
	// member stopped hard (through its agent, which would restart a member
	// that merely exited) and two of them losing their WAL; `steward
	// recover` rebuilds the cluster from the survivor (its data is not
	// behind the backup) and adds the other two: healthy, the cluster ID
	// and the survivor's member ID kept, the keyspace of before, served
	// with the operator's certificates (the client of the operator's CA
	// reads it) that the spec still names, the lost data dirs moved aside.
	var bm backup.Manifest
	if out := e.MustRun("backup", "now", "-o", "json"); json.Unmarshal([]byte(out), &bm) != nil || bm.ID == "" {
		t.Fatalf("backup now on the adopted cluster: %s", out)
	}
	want := workload.TakeDigest(t, fcli, "", 0)
	preSpec := e.Spec()
	preMembers, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	names := preSpec.MemberNames()
	for _, n := range names {
		e.MustRun("member", "stop", n, "--force")
	}
	for _, n := range names[:2] {
		m, _ := preSpec.Member(n)
		if err := os.RemoveAll(filepath.Join(m.DataDir, "member", "wal")); err != nil {
			t.Fatal(err)
		}
	}
	rep, out := harness.RecoverJSON(t, e)
	if rep.Action != "reseed" || rep.Seed != names[2] || !slices.Equal(rep.Added, names[:2]) {
		t.Fatalf("recover of the adopted cluster with two WALs lost: want %s reseeding, %v added; got %s", names[2], names[:2], out)
	}
	e.WaitStatus(60*time.Second, "every member healthy under the agent after recover", healthyUnderAgent)
	workload.RequireEqual(t, "after recover", workload.TakeDigest(t, fcli, "", 0), want)
	recovered, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if recovered.Header.ClusterId != preMembers.Header.ClusterId || len(recovered.Members) != 3 {
		t.Errorf("after recover: cluster %x with %d members, want %x with 3", recovered.Header.ClusterId, len(recovered.Members), preMembers.Header.ClusterId)
	}
	for _, m := range preMembers.Members {
		kept := slices.ContainsFunc(recovered.Members, func(u *etcdserverpb.Member) bool { return u.ID == m.ID && u.Name == m.Name })
		if kept != (m.Name == names[2]) {
			t.Errorf("member %s (%x): ID kept %v after recover, want kept only for the survivor %s: %v", m.Name, m.ID, kept, names[2], recovered.Members)
		}
	}
	for _, n := range names[:2] {
		m, _ := preSpec.Member(n)
		if aside, _ := filepath.Glob(m.DataDir + ".*-2*"); len(aside) == 0 {
			t.Errorf("member %s: its old data dir was not moved aside", n)
		}
	}
	sp := e.Spec()
	if !sp.AllAdopted() || !reflect.DeepEqual(sp.External, preSpec.External) {
		t.Errorf("after recover: every member adopted %v, external block %+v (was %+v)", sp.AllAdopted(), sp.External, preSpec.External)
	}
	for _, m := range preSpec.Members {
		if n, _ := sp.Member(m.Name); !reflect.DeepEqual(n.Adopted, m.Adopted) || n.DataDir != m.DataDir {
			t.Errorf("recover changed how %s runs (its certificates, settings or data dir): %+v, was %+v", m.Name, n.Adopted, m.Adopted)
		}
	}
	restoreAdopted(t, e, fcli, want)
}

// healthyUnderAgent: every member healthy and run by an agent (a pid).
func healthyUnderAgent(st *status.Status) bool {
	for _, m := range st.Members {
		if m.PID == 0 {
			return false
		}
	}
	return harness.Healthy(st)
}

// restoreAdopted: recover's restore action on a fully adopted cluster.
// Every member stopped hard and every WAL lost: `steward recover` restores
// the latest backup (the agent's continuous backups since attach) onto
// every member's own data dir, the old ones moved aside: every member
// healthy under the agent, the keyspace want (nothing was written since),
// the spec's adopted members unchanged (their certificates, settings and
// data dirs), read through the operator's client.
func restoreAdopted(t *testing.T, e *harness.Env, fcli *clientv3.Client, want workload.Digest) {
	t.Helper()
	preSpec := e.Spec()
	names := preSpec.MemberNames()
	e.MustRun("backup", "now")
	for _, n := range names {
		e.MustRun("member", "stop", n, "--force")
	}
	for _, n := range names {
		m, _ := preSpec.Member(n)
		if err := os.RemoveAll(filepath.Join(m.DataDir, "member", "wal")); err != nil {
			t.Fatal(err)
		}
	}
	rep, out := harness.RecoverJSON(t, e)
	if rep.Action != "restore" || rep.RestoredFrom == "" {
		t.Fatalf("recover of the adopted cluster with every WAL lost: want a restore; got %s", out)
	}
	e.WaitStatus(90*time.Second, "every member healthy under the agent after the restore", healthyUnderAgent)
	workload.RequireEqual(t, "after recover's restore", workload.TakeDigest(t, fcli, "", 0), want)
	sp := e.Spec()
	for _, m := range preSpec.Members {
		if n, _ := sp.Member(m.Name); !n.IsAdopted() || !reflect.DeepEqual(n.Adopted.TLS, m.Adopted.TLS) || n.DataDir != m.DataDir {
			t.Errorf("recover's restore changed how %s runs (its certificates or data dir): %+v, was %+v", m.Name, n.Adopted, m.Adopted)
		}
	}
}

// foreignManifest writes a kubeadm-style static pod manifest of member m
// of f (its command line, the cluster's directory as a hostPath volume at
// the same path) in a manifests directory of its own, and returns its path.
func foreignManifest(t *testing.T, f *harness.ForeignCluster, m *harness.ForeignMember) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var cmd strings.Builder
	cmd.WriteString("    - etcd\n")
	for _, a := range m.Cmdline[1:] {
		fmt.Fprintf(&cmd, "    - %q\n", a)
	}
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: etcd-%s, namespace: kube-system}
spec:
  hostNetwork: true
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:%s-0
    command:
%s    volumeMounts:
    - {mountPath: %s, name: etcd}
  volumes:
  - name: etcd
    hostPath: {path: %s, type: DirectoryOrCreate}
`, m.Name, f.Version, cmd.String(), f.Dir, f.Dir)
	p := filepath.Join(dir, "etcd.yaml")
	if err := os.WriteFile(p, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAdoptResumeAfterKill (issue 14): an adopt plan killed with SIGKILL
// before and after every step's action in turn (harness.KillAtEveryStep: the first
// run is `steward adopt --pid`, every later one `steward plan resume`),
// infra1 of an attached three-member etcd 3.5 cluster under a writer: at
// the end the plan is done, the old process is gone, infra1 runs under the
// local agent with its member ID and the cluster ID unchanged, and no
// acknowledged write is lost.
func TestAdoptResumeAfterKill(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignCluster(t, adoptVersion, 3)
	fcli := f.MustClient()
	e := attachForAdopt(t, f)
	old := f.Members[0]
	oldPID := old.PID()
	before, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	w := harness.UnderWrites(t, fcli, workload.Options{Prefix: "/adoptresume", Interval: 10 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{Acked: 100})

	harness.KillAtEveryStep(t, e, "adopt", "--pid", strconv.Itoa(oldPID))

	if old.Running() {
		t.Errorf("the old process %d of %s still runs after the adoption", oldPID, old.Name)
	}
	if m, _ := e.Spec().Member(old.Name); !m.IsAdopted() || m.DataDir != old.DataDir {
		t.Errorf("after the resumed adoption the spec has %s with agent %q, data dir %q, adopted %v", old.Name, m.Agent, m.DataDir, m.IsAdopted())
	}
	st := e.WaitStatus(30*time.Second, old.Name+" healthy under the agent", func(st *status.Status) bool {
		ms, _ := st.Member(old.Name)
		return harness.Healthy(st) && ms.PID != 0
	})
	if ms, _ := st.Member(old.Name); ms.PID == oldPID {
		t.Errorf("%s runs as the old pid %d", old.Name, oldPID)
	}
	after, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.ClusterId != before.Header.ClusterId || len(after.Members) != len(before.Members) {
		t.Errorf("after the adoption: cluster %x with %d members, want %x with %d", after.Header.ClusterId, len(after.Members), before.Header.ClusterId, len(before.Members))
	}
	for _, m := range before.Members {
		if !slices.ContainsFunc(after.Members, func(u *etcdserverpb.Member) bool { return u.ID == m.ID && u.Name == m.Name }) {
			t.Errorf("member %s (%x) is gone after the resumed adoption: %v", m.Name, m.ID, after.Members)
		}
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the adoption", w.AckedAbove(w.Acked()+100))
	w.Finish(t)
}

// TestAdoptPeerNames: a cluster whose members each have a peer certificate
// named after them and no --peer-cert-allowed-cn (kubeadm's shape). Two of
// its three members adopted one after the other under a writer, each
// passing the adoption's health gate; leadership moved to the first, so
// that raft traffic flows between the two adopted members; the agent runs
// them without --peer-cert-allowed-cn, as they ran. The agent used to
// restrict each adopted member's peer port to its own certificate's name,
// which refused its peers' connections. Then the third adopted and
// Steward takes over issuing the certificates (takeOverCerts): refused
// before for peer certificates of different names, it now issues one of
// the cluster's own peer name, which members not switched yet let in.
func TestAdoptPeerNames(t *testing.T) {
	t.Parallel()
	f := harness.StartForeignClusterPeerNames(t, adoptVersion, 3)
	fcli := f.MustClient()
	e := attachForAdopt(t, f)
	before, err := fcli.MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	w := harness.UnderWrites(t, fcli, workload.Options{Prefix: "/peernames", Interval: 10 * time.Millisecond, Attempts: 5, Timeout: 2 * time.Second}, harness.Expect{Acked: 100})
	adopted := f.Members[:2]
	for _, m := range adopted {
		e.MustRun("adopt", "--pid", strconv.Itoa(m.PID()))
	}
	e.MustRun("leader", "move", "--to", adopted[0].Name)
	st := e.WaitStatus(60*time.Second, "every member healthy, two adopted, "+adopted[0].Name+" leading", func(st *status.Status) bool {
		return harness.Healthy(st) && st.Cluster.Leader == adopted[0].Name
	})
	for _, m := range adopted {
		ms, _ := st.Member(m.Name)
		if ms.PID == 0 {
			t.Fatalf("%s has no agent-run process: %+v", m.Name, ms)
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", ms.PID))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(cmdline), "peer-cert-allowed-cn") {
			t.Errorf("%s runs with --peer-cert-allowed-cn, which it did not have: %q", m.Name, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write under the adopted leader", w.AckedAbove(w.Acked()+200))

	// The third, then the certificates.
	e.MustRun("adopt", "--pid", strconv.Itoa(f.Members[2].PID()))
	takeOverCerts(t, e, f, (*etcdserverpb.MemberListResponse)(before))
	peerCN, _, err := pki.CertNames(pki.FilesIn(filepath.Join(e.Dir, "pki")).PeerCert)
	if err != nil || peerCN != e.Spec().Name+"-peer" {
		t.Errorf("Steward's peer certificate after the take-over is named %q (%v), want the cluster's %s-peer", peerCN, err, e.Spec().Name)
	}
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the writer to write after the take-over", w.AckedAbove(w.Acked()+200))
	w.Finish(t)
}

// undoStaticPod adopts infra2 of f through a kubeadm-style static pod
// manifest and undoes it: the manifest comes back to its path unchanged
// (none kept in DIR/adopted/), the test playing the kubelet (none runs
// here) starts the member's process from it when it reappears, and the
// undo's health gate passes; the spec has infra2 external again, its
// member ID unchanged, the adopt plan rolled back.
func undoStaticPod(t *testing.T, e *harness.Env, f *harness.ForeignCluster, list func(context.Context, ...clientv3.OpOption) (*clientv3.MemberListResponse, error)) {
	t.Helper()
	m := f.Members[1]
	_, id := memberID(t, list, m.Name)
	manifest := foreignManifest(t, f, m)
	orig, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var p plan.Plan
	if out := e.MustRun("adopt", "--manifest", manifest, "-o", "json"); json.Unmarshal([]byte(out), &p) != nil || p.State != plan.Done {
		t.Fatalf("adopt --manifest: %s", out)
	}
	kept := filepath.Join(e.Dir, "adopted", m.Name, filepath.Base(manifest))
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("the manifest was not kept for undo: %v", err)
	}
	harness.Eventually(t, 30*time.Second, 50*time.Millisecond, "the test's process of "+m.Name+" to be reaped", func() error {
		if m.Running() {
			return fmt.Errorf("pid %d", m.PID())
		}
		return nil
	})

	// The kubelet: starts the static pod's process when the manifest is back.
	kubelet := make(chan error, 1)
	go func() {
		for {
			if _, err := os.Stat(manifest); err == nil {
				kubelet <- m.Start()
				return
			}
			select {
			case <-t.Context().Done():
				kubelet <- t.Context().Err()
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	e.MustRun("adopt", "--undo", m.Name)
	select {
	case err := <-kubelet:
		if err != nil {
			t.Fatalf("the kubelet's start of %s: %v", m.Name, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the undo finished, yet the manifest never came back where the kubelet reads it")
	}
	if back, err := os.ReadFile(manifest); err != nil || string(back) != string(orig) {
		t.Errorf("the manifest after the undo: %v; changed %v", err, string(back) != string(orig))
	}
	if _, err := os.Stat(kept); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a copy of the manifest stays in %s after the undo (%v): the kubelet's is the one", kept, err)
	}
	requireGivenBack(t, e, list, m.Name, id, p.ID, "the static pod's undo")
}
