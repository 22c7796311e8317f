package upgrade

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-semver/semver"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/etcd-steward/steward/pkg/backupd"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/isolated"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/status"
)

// Executor runs plan steps against a cluster. Every step converges: run
// again after it completed or died halfway, it finds the work done (or
// partly done) and finishes it.
type Executor struct {
	C *cluster.Cluster
	// Progress receives a line per notable action (may be nil).
	Progress progress.Func
	// HealthTimeout bounds each wait for health, catch-up and versions
	// (default 2 minutes).
	HealthTimeout time.Duration
}

func (e *Executor) timeout() time.Duration {
	if e.HealthTimeout > 0 {
		return e.HealthTimeout
	}
	return 2 * time.Minute
}

// Execute implements plan.Executor.
func (e *Executor) Execute(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	// The spec may have changed (a step records versions in it).
	c, wait, err := e.C.ForStep(p, e.HealthTimeout)
	if err != nil {
		return err
	}
	e.C, e.HealthTimeout = c, wait
	switch s.Kind {
	case StepPreflight:
		return e.preflight(ctx, p, s)
	case StepBackup:
		return e.backup(ctx, p, s)
	case StepDowngradeStart:
		return e.downgradeEnable(ctx, s)
	case StepStorageVersion:
		return e.waitStorageVersion(ctx, s)
	case StepMember:
		return e.member(ctx, p, s)
	case StepOffline:
		return e.offline(ctx, p, s)
	case StepReplace:
		return e.replace(ctx, p, s)
	case StepStart:
		return e.start(ctx, s)
	case StepClusterVersion:
		return e.clusterVersion(ctx, s)
	}
	return fmt.Errorf("unknown step kind %q", s.Kind)
}

func (e *Executor) preflight(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	st, err := status.Get(ctx, e.C)
	if err != nil {
		return err
	}
	from, err := uniformVersion(e.C, st)
	if err != nil {
		return err
	}
	if from == s.Version {
		e.Progress.Say("  every member already runs %s", s.Version)
		return nil
	}
	checks, err := Preflight(ctx, e.C, from, s.Version)
	if err != nil {
		return err
	}
	warnings, err := Refusal(checks, p.Force)
	for _, w := range warnings {
		e.Progress.Say("  warning: %s", w)
	}
	return err
}

// backup takes a full snapshot and verifies it; a backup recorded by an
// earlier attempt of this step is kept when it still verifies.
func (e *Executor) backup(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	key := fmt.Sprintf("backup.%d", s.Index)
	if id := p.Value(key); id != "" {
		if res, err := restore.Verify(ctx, e.C, id, "", false); err == nil && len(res) == 1 && res[0].OK {
			e.Progress.Say("  backup %s verified", id)
			return nil
		}
	}
	m, err := backupd.Now(ctx, e.C, backupd.Options{})
	if err != nil {
		return err
	}
	res, err := restore.Verify(ctx, e.C, m.ID, "", false)
	if err != nil {
		return fmt.Errorf("verify backup %s: %w", m.ID, err)
	}
	if len(res) != 1 || !res[0].OK {
		return fmt.Errorf("backup %s does not verify: %+v", m.ID, res)
	}
	p.SetValue(key, m.ID)
	if p.Value("backup") == "" {
		p.SetValue("backup", m.ID)
	}
	e.Progress.Say("  backup %s at revision %d verified", m.ID, m.EndRevision)
	return nil
}

// member swaps one member to s.Version: moves leadership away first, then
// has the agent restart it on the new binary, and waits until the member is
// healthy and has applied what the leader had when it came back.
func (e *Executor) member(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	st, err := status.Get(ctx, e.C)
	if err != nil {
		return err
	}
	ms, ok := st.Member(s.Member)
	if !ok {
		return fmt.Errorf("member %s is not in the cluster", s.Member)
	}
	if ms.Version == s.Version && ms.Healthy {
		e.Progress.Say("  %s already runs %s", s.Member, s.Version)
		return e.recordMemberVersion(ctx, s)
	}
	// An older minor may start only when the cluster already works at
	// that minor: etcd's downgrade is enabled, or the cluster version
	// never advanced past it (an upgrade stopped halfway).
	allow := false
	if cv, err := semver.NewVersion(st.Cluster.Version); err == nil {
		tv := semver.New(s.Version)
		allow = cv.Major == tv.Major && cv.Minor <= tv.Minor
	}
	turn := rolling.Action{
		Act: func(ctx context.Context, _ *status.Status, name string) error {
			if err := e.snapshotFirst(ctx, p, ms, s.Version); err != nil {
				return err
			}
			if err := SwapMemberVersion(ctx, e.C, name, s.Version, allow); err != nil {
				return err
			}
			e.Progress.Say("  %s restarted on %s", name, s.Version)
			return nil
		},
		CaughtUp: func(ctx context.Context, name string) error { return e.waitCaughtUp(ctx, name, s.Version) },
		Progress: e.Progress,
	}
	return turn.Member(ctx, rolling.Of(e.C), st, s.Member, pending(st, p, s.Index))
}

// snapshotFirst makes the member take a raft snapshot on the version its
// data dir last ran when the catalogue says the target line cannot replay
// WAL entries older lines wrote. An offline step that already took one on
// that version (plan value snapshot.MEMBER) is enough.
func (e *Executor) snapshotFirst(ctx context.Context, p *plan.Plan, ms status.MemberStatus, target string) error {
	last := ms.DataDirVersion
	if last == "" || p.Value("snapshot."+ms.Name) == last {
		return nil
	}
	need, err := e.needsSnapshot(last, target)
	if err != nil || !need {
		return err
	}
	return SnapshotMember(ctx, e.C, ms.Name, last, e.timeout())
}

// needsSnapshot reports whether data last run by version last needs a
// raft snapshot before target may replay its WAL: target is a newer minor
// whose catalogue entry says snapshotBeforeUpgrade.
func (e *Executor) needsSnapshot(last, target string) (bool, error) {
	lv, err := semver.NewVersion(last)
	if err != nil {
		return false, nil
	}
	tv := semver.New(target)
	if lv.Major != tv.Major || lv.Minor >= tv.Minor {
		return false, nil
	}
	cat, err := Catalogue(e.C.Dir)
	if err != nil {
		return false, err
	}
	entry, ok := cat.Minor(minorOf(target))
	return ok && entry.SnapshotBeforeUpgrade, nil
}

// offline runs one intermediate version of the offline and restore
// strategies on private client ports: step.Member, or every member when
// it is "". When the plan's next version needs it, the members also write
// a raft snapshot there, recorded as plan values snapshot.MEMBER.
func (e *Executor) offline(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	v, err := PayloadOf(p)
	if err != nil {
		return err
	}
	next := v.To
	if s.Index+1 < len(p.Steps) && p.Steps[s.Index+1].Member == s.Member {
		next = p.Steps[s.Index+1].Version
	}
	snap, err := e.needsSnapshot(s.Version, next)
	if err != nil {
		return err
	}
	names := []string{s.Member}
	if s.Member == "" {
		names = e.C.Spec.MemberNames()
	}
	if err := isolated.Run(ctx, e.C, names, s.Version, isolated.Options{Snapshot: snap, Timeout: e.timeout()}); err != nil {
		return err
	}
	if snap {
		for _, name := range names {
			p.SetValue("snapshot."+name, s.Version)
		}
	}
	e.Progress.Say("  %s ran %s on private client ports and stopped", strings.Join(names, ", "), s.Version)
	return nil
}

// replace stops every member and gives each a fresh data dir restored from
// the stopped database, or, in a rollback by restore, from the backup the
// upgrade took first (plan value base-backup) with the stopped database's
// keyspace grafted in. The old dirs are recorded as plan values
// old-datadir.MEMBER.
func (e *Executor) replace(ctx context.Context, p *plan.Plan, s *plan.Step) error {
	v, err := PayloadOf(p)
	if err != nil {
		return err
	}
	o := ReplaceOptions{Version: v.From, Target: s.Version, Timeout: e.timeout()}
	if base := p.Value("base-backup"); base != "" {
		o.BaseBackup, o.BaseVersion = base, s.Version
	}
	rep, err := ReplaceDataDirs(ctx, e.C, o)
	if err != nil {
		return err
	}
	for name, old := range rep.Old {
		p.SetValue("old-datadir."+name, old)
	}
	if rep.Source != "" {
		e.Progress.Say("  new data dirs restored from the database of %s at revision %d", rep.Source, rep.Revision)
	}
	return nil
}

// start starts every member on s.Version and waits until all are healthy
// on it: the end of the restore strategy, where members start together as
// the cluster their new data dirs make.
func (e *Executor) start(ctx context.Context, s *plan.Step) error {
	for _, m := range e.C.Spec.Members {
		// Asked of the agent, not of etcd: members that are all stopped
		// would make every etcd call wait for its dial timeout.
		if ac, err := e.C.RuntimeFor(m); err == nil {
			if ms, err := ac.Member(ctx, m.Name); err == nil && ms.State == memberrt.StateRunning && ms.Version == s.Version {
				continue // started by an earlier attempt
			}
		}
		if err := SwapMemberVersion(ctx, e.C, m.Name, s.Version, false); err != nil {
			return err
		}
	}
	err := e.waitFor(ctx, "every member healthy on "+s.Version, func(st *status.Status) string {
		for _, m := range st.Members {
			if m.Version != s.Version || !m.Healthy {
				return fmt.Sprintf("%s: version %q, healthy %v %s", m.Name, m.Version, m.Healthy, m.LastError)
			}
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("health gate: %w", err)
	}
	e.Progress.Say("  every member healthy on %s", s.Version)
	return nil
}

func (e *Executor) recordMemberVersion(ctx context.Context, s *plan.Step) error {
	m, ok := e.C.Spec.Member(s.Member)
	if !ok || e.C.Spec.VersionOf(*m) == s.Version {
		return nil
	}
	return SwapMemberVersion(ctx, e.C, s.Member, s.Version, false)
}

// pending is the members of the member steps after step index, in
// order, for rolling.Transferee: a member whose later steps all go to the
// version it runs already is left out (those steps find it done and
// restart nothing, so leadership handed to it stays).
func pending(st *status.Status, p *plan.Plan, index int) []string {
	var out []string
	for _, s := range p.Steps[index+1:] {
		if s.Kind != StepMember || slices.Contains(out, s.Member) {
			continue
		}
		if ms, ok := st.Member(s.Member); ok && !needsStep(p, index, s.Member, ms.Version) {
			continue
		}
		out = append(out, s.Member)
	}
	return out
}

// needsStep reports whether a member step after index takes member to a
// version other than the one it runs.
func needsStep(p *plan.Plan, index int, member, runs string) bool {
	for _, s := range p.Steps[index+1:] {
		if s.Kind == StepMember && s.Member == member && s.Version != runs {
			return true
		}
	}
	return false
}

func (e *Executor) waitCaughtUp(ctx context.Context, name, version string) error {
	g := &status.CatchUp{Name: name, Version: version}
	err := e.waitFor(ctx, name+" healthy and caught up on "+version, func(st *status.Status) string {
		if why := g.Check(st); why != "" {
			return why
		}
		ms, _ := st.Member(name)
		e.Progress.Say("  %s healthy on %s, applied index %d", name, version, ms.RaftAppliedIndex)
		return ""
	})
	if err != nil {
		return fmt.Errorf("health gate: %w", err)
	}
	return nil
}

// clusterVersion waits until every member runs s.Version, the cluster
// version is its minor and no downgrade is in progress (finishDowngrade
// ends one that is complete), then records s.Version as the spec's
// version.
func (e *Executor) clusterVersion(ctx context.Context, s *plan.Step) error {
	want := minorOf(s.Version) + ".0"
	cli, err := e.C.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	cancelled := false
	err = e.waitFor(ctx, "cluster version "+want, func(st *status.Status) string {
		for _, m := range st.Members {
			if m.Version != s.Version {
				return fmt.Sprintf("%s runs %q", m.Name, m.Version)
			}
		}
		if st.Cluster.Version != want {
			return fmt.Sprintf("cluster version is %q", st.Cluster.Version)
		}
		return e.finishDowngrade(ctx, cli, want, &cancelled)
	})
	if err != nil {
		return err
	}
	if cancelled {
		e.Progress.Say("  every member runs %s: ended etcd's downgrade", s.Version)
	}
	if err := e.C.SetVersion(ctx, s.Version); err != nil {
		return err
	}
	e.Progress.Say("  cluster on %s (cluster version %s)", s.Version, want)
	return nil
}

// finishDowngrade ends etcd's downgrade to version (the cluster version)
// once every member runs it, and returns what is still pending ("" when
// no downgrade is enabled on any member). It sets *cancelled when it asked
// etcd to end one.
//
// etcd's leader ends a complete downgrade by itself, but only at its next
// check (--downgrade-check-time, 5 s by default), and a cancel it proposes
// while leadership moves times out and waits for the check after. Until
// then a member that joins on the target version is refused: its
// bootstrap asks its peers whether a downgrade is enabled and, if so,
// accepts only a cluster version one minor above its own, so it exits with
// "incompatible with current running cluster" (a `member replace` right
// after a rollback to 3.5). The caller has seen every member on the target
// and the cluster version at its minor, so the downgrade is complete and
// cancelling it is what etcd's leader would do.
//
// 3.6 and later report the downgrade in each member's status, and their
// cancel always answers success (a failure is only logged), so the status
// is what tells there. 3.5 reports nothing: its cancel answers "no
// inflight downgrade job" when none was enabled. 3.4 has no downgrade at
// all (nor the RPC).
func (e *Executor) finishDowngrade(ctx context.Context, cli *clientv3.Client, version string, cancelled *bool) string {
	if v, err := semver.NewVersion(version); err == nil && v.Major == 3 && v.Minor < 5 {
		return ""
	}
	enabled, unknown := "", false
	if p := e.eachMember(ctx, cli, func(name string, r *clientv3.StatusResponse) string {
		switch {
		case r.DowngradeInfo == nil:
			unknown = true
		case r.DowngradeInfo.Enabled && enabled == "":
			enabled = name
		}
		return ""
	}); p != "" {
		return p
	}
	if enabled == "" && !unknown {
		return ""
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := cli.Downgrade(dctx, clientv3.DowngradeCancel, "")
	cancel()
	switch {
	case err == nil:
		*cancelled = true
	case errors.Is(err, rpctypes.ErrNoInflightDowngrade), grpcstatus.Code(err) == codes.Unimplemented:
	default:
		return "end etcd's downgrade, complete on every member: " + err.Error()
	}
	if enabled != "" {
		// Check again that every member applied the cancel.
		return enabled + ": etcd's downgrade is still enabled"
	}
	return ""
}

// downgradeEnable validates and enables etcd's downgrade to the target's
// minor, unless the cluster version already is that minor.
func (e *Executor) downgradeEnable(ctx context.Context, s *plan.Step) error {
	st, err := status.Get(ctx, e.C)
	if err != nil {
		return err
	}
	target := minorOf(s.Version)
	if st.Cluster.Version == target+".0" {
		e.Progress.Say("  cluster version already %s", st.Cluster.Version)
		return nil
	}
	cli, err := e.C.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := cli.Downgrade(dctx, clientv3.DowngradeValidate, target); err != nil {
		return fmt.Errorf("etcd refused to validate the downgrade to %s: %w", target, err)
	}
	if _, err := cli.Downgrade(dctx, clientv3.DowngradeEnable, target); err != nil {
		return fmt.Errorf("enable etcd's downgrade to %s: %w", target, err)
	}
	e.Progress.Say("  etcd's downgrade to %s enabled", target)
	return nil
}

// waitStorageVersion waits until every member that reports a storage
// version reports the target's minor.
func (e *Executor) waitStorageVersion(ctx context.Context, s *plan.Step) error {
	want := minorOf(s.Version) + ".0"
	cli, err := e.C.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	return e.waitFor(ctx, "storage version "+want, func(*status.Status) string {
		return e.eachMember(ctx, cli, func(name string, r *clientv3.StatusResponse) string {
			if r.StorageVersion != "" && r.StorageVersion != want {
				return fmt.Sprintf("%s storage version %s", name, r.StorageVersion)
			}
			return ""
		})
	})
}

// eachMember asks every member for etcd's status and returns the first
// problem check finds (or the first member that does not answer).
//
// Each answer must come from the member asked (its ID in etcd's member
// list): another member answering on its URL is that problem.
func (e *Executor) eachMember(ctx context.Context, cli *clientv3.Client, check func(name string, r *clientv3.StatusResponse) string) string {
	lctx, lcancel := context.WithTimeout(ctx, 3*time.Second)
	list, err := cli.MemberList(lctx)
	lcancel()
	if err != nil {
		return fmt.Sprintf("member list: %v", err)
	}
	ids := map[string]uint64{}
	for _, m := range list.Members {
		ids[m.Name] = m.ID
	}
	for _, m := range e.C.Spec.Members {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		r, err := cli.Status(sctx, m.ClientURL)
		cancel()
		if err != nil {
			return fmt.Sprintf("%s: %v", m.Name, err)
		}
		if err := status.CheckAnswer(m.Name, ids[m.Name], m.ClientURL, r); err != nil {
			return err.Error()
		}
		if p := check(m.Name, r); p != "" {
			return p
		}
	}
	return ""
}

// waitFor polls status until problem returns "" or the timeout passes.
func (e *Executor) waitFor(ctx context.Context, what string, problem func(*status.Status) string) error {
	ctx, cancel := context.WithTimeout(ctx, e.timeout())
	defer cancel()
	last := ""
	for {
		st, err := status.Get(ctx, e.C)
		if err == nil {
			if last = problem(st); last == "" {
				return nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %s for %s: %s", e.timeout(), what, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
