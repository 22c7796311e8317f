package backup_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/filelock"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/pkg/upgrade"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// loadMixed writes n keys through multi-key transactions, with some keys
// under leases and some deletes, and returns the last revision.
func loadMixed(t *testing.T, cli *clientv3.Client, n int) int64 {
	t.Helper()
	ctx := t.Context()
	var leases []clientv3.LeaseID
	for i := 0; i < 5; i++ {
		l, err := cli.Grant(ctx, 3600)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l.ID)
	}
	var rev int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	per := n / 4
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < per; i += 10 {
				var ops []clientv3.Op
				for j := i; j < i+10 && j < per; j++ {
					k := fmt.Sprintf("load/%d/%06d", w, j)
					if j%7 == 0 {
						ops = append(ops, clientv3.OpPut(k, "leased", clientv3.WithLease(leases[j%len(leases)])))
					} else {
						ops = append(ops, clientv3.OpPut(k, strconv.Itoa(j)))
					}
				}
				if i%50 == 0 && i > 0 {
					ops = append(ops, clientv3.OpDelete(fmt.Sprintf("load/%d/%06d", w, i-25)))
				}
				resp, err := cli.Txn(ctx).Then(ops...).Commit()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if resp.Header.Revision > rev {
					rev = resp.Header.Revision
				}
				mu.Unlock()
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return rev
}

// TestContinuousBackup writes 50,000 keys with leases, deletes and
// multi-key transactions while continuous backups run, then loses every
// member's data and recovers (`steward recover`): no write acknowledged more
// than the recovery-point window before the loss is missing and keys with
// TTLs still expire; a restore to a revision gives a keyspace whose digest
// equals the source's at that revision.
func TestContinuousBackup(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, harness.Versions()[1])
	cli := e.Client()

	var want workload.Digest
	var short clientv3.LeaseID
	if !t.Run("50,000 keys backed up", func(t *testing.T) {
		e := e.For(t)
		rev := loadMixed(t, cli, 50000)
		// Every revision reaches the store.
		harness.WaitBackedUp(t, e, rev)
		want = workload.TakeDigest(t, cli, "", rev)
		if st := e.Status(); harness.Cond(st, status.CondBackupReady).Status != "True" {
			t.Errorf("BackupReady while backups run: %+v", harness.Cond(st, status.CondBackupReady))
		}
		// A short-lived key: its lease must still expire after the restore.
		l, err := cli.Grant(t.Context(), 6)
		if err != nil {
			t.Fatal(err)
		}
		short = l.ID
		if _, err := cli.Put(t.Context(), "ttl/short", "expires", clientv3.WithLease(short)); err != nil {
			t.Fatal(err)
		}
	}) {
		return
	}

	var res *workload.Result
	var lossAt time.Time
	var chainFull string
	if !t.Run("every member's data lost under writes", func(t *testing.T) {
		e := e.For(t)
		// Writes go on until the loss; each acknowledgement is timed.
		w := workload.Start(t, cli, workload.Options{Prefix: "rpo", Timeout: time.Second, Interval: 2 * time.Millisecond})
		time.Sleep(3 * time.Second) // a window of writes before the loss, not synchronisation

		// The loss: the agent and every member die at once, and their data is gone.
		lossAt = time.Now()
		e.KillAll()
		res = w.Stop()
		cli.Close()
		harness.RemoveDataDirs(t, e, e.Spec().Members)
		// The chain the loss left: its full backup, for the point-in-time
		// restore at the end (by then the recovered cluster has newer ones).
		for _, m := range harness.ListBackups(t, e) {
			if m.Kind == backup.KindFull {
				chainFull = m.ID
			}
		}
		if len(res.Acked) == 0 {
			t.Fatalf("no write acknowledged before the loss: %s", res)
		}
	}) {
		return
	}

	if !t.Run("recover: no write older than 1 s lost", func(t *testing.T) {
		e := e.For(t)
		// The agent comes back, refuses to start members on empty data dirs
		// while backups exist, and `steward recover` restores the newest state.
		_, _, _ = e.Run("up", "--timeout", "10s")
		if out := e.MustRun("recover", "-o", "json"); !strings.Contains(out, `"action": "restore"`) {
			t.Fatalf("recover after losing every data dir: %s", out)
		}
		e.WaitStatus(60*time.Second, "healthy after the recovery", harness.Healthy)
		lost, err := workload.Missing(t.Context(), e.Client(), res)
		if err != nil {
			t.Fatal(err)
		}
		var missing []string
		var lags []time.Duration
		for _, wr := range lost {
			lag := lossAt.Sub(wr.End)
			lags = append(lags, lag)
			if lag > time.Second {
				missing = append(missing, fmt.Sprintf("%s (acknowledged %s before the loss)", wr.Keys[0], lag.Round(time.Millisecond)))
			}
		}
		sort.Slice(lags, func(i, j int) bool { return lags[i] > lags[j] })
		t.Logf("%d writes acknowledged in the last window; %d not restored (oldest %v before the loss); %s", len(res.Acked), len(lags), firstOr(lags), res)
		if len(missing) > 0 {
			t.Fatalf("%d acknowledged writes older than the 1 s recovery point are missing: %v", len(missing), missing[:min(5, len(missing))])
		}
	}) {
		return
	}

	if !t.Run("a TTL key expires again", func(t *testing.T) {
		cli := e.For(t).Client()
		// Recovery may take longer than the lease's 6 s, so its presence is
		// read at the restored revision: the one the restore marked
		// compacted, which a watch from revision 1 reports.
		wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
		wresp := <-cli.Watch(wctx, "ttl/short", clientv3.WithRev(1))
		wcancel()
		if wresp.CompactRevision == 0 {
			t.Fatalf("no compaction mark after the recovery: %v", wresp.Err())
		}
		if r, err := cli.Get(t.Context(), "ttl/short", clientv3.WithRev(wresp.CompactRevision)); err != nil || r.Count != 1 || r.Kvs[0].Lease != int64(short) {
			t.Fatalf("ttl/short with its lease missing at the restored revision %d: %v %v", wresp.CompactRevision, r, err)
		}
		harness.Eventually(t, 30*time.Second, 200*time.Millisecond, "a key under a 6 s lease to expire after the restore", func() error {
			r, err := cli.Get(t.Context(), "ttl/short")
			if err != nil {
				return err
			}
			if r.Count != 0 {
				return fmt.Errorf("ttl/short still there at revision %d (lease %x)", r.Header.Revision, r.Kvs[0].Lease)
			}
			return nil
		})
	}) {
		return
	}

	t.Run("restore to the digest's revision", func(t *testing.T) {
		e := e.For(t)
		// Exactly the source's keyspace.
		e.MustRun("down")
		e.MustRun("restore", "--backup", chainFull, "--to-revision", fmt.Sprint(want.Rev), "--force")
		e.MustRun("up")
		workload.RequireEqual(t, fmt.Sprintf("restored to revision %d", want.Rev), workload.TakeDigest(t, e.Client(), "", 0), want)
	})
}

func firstOr(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[0]
}

// TestDeltaBadInput: a bit-flipped delta fails verification; a gap in the
// delta chain is reported by verify and refused by restore (which would
// otherwise drop the changes after it); a revision outside the backed-up
// range is refused; refusals change no data dir.
func TestDeltaBadInput(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	cli := e.Client()
	ctx := t.Context()
	var deltas []backup.Manifest
	for round := 0; len(deltas) < 3; round++ {
		if round > 100 {
			t.Fatalf("only %d delta segments after 100 rounds of writes", len(deltas))
		}
		rev := putKeys(t, cli, fmt.Sprintf("round%03d/", round), 20)
		harness.WaitBackedUp(t, e, rev)
		ms := harness.ListBackups(t, e)
		deltas = deltas[:0]
		for _, m := range ms {
			if m.Kind == backup.KindDelta {
				deltas = append(deltas, m)
			}
		}
	}
	e.MustRun("backup", "verify", "--all")
	cli.Close()
	e.MustRun("down")
	last := deltas[len(deltas)-1].EndRevision

	mid := deltas[1]
	obj := filepath.Join(e.Dir, "backups", mid.Object)
	good, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0x08
	if err := os.WriteFile(obj, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if out := e.MustFail("backup", "verify", "--all"); !strings.Contains(out, mid.ID) || !strings.Contains(out, "failed verification") {
		t.Errorf("verify with a bit-flipped delta: %s", out)
	}
	if out := e.MustFail("restore", "--force"); !strings.Contains(out, "corrupt") {
		t.Errorf("restore through a bit-flipped delta: %s", out)
	}

	// A gap: the middle segment is gone.
	if err := os.Rename(filepath.Join(e.Dir, "backups", "delta", mid.ID+".json"), filepath.Join(e.Dir, "removed.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(obj, good, 0o600); err != nil {
		t.Fatal(err)
	}
	out := e.MustFail("backup", "verify", "--all")
	if !strings.Contains(out, fmt.Sprintf("revisions %d to %d are missing", mid.StartRevision, mid.EndRevision)) {
		t.Errorf("verify with a gap: %s", out)
	}
	dataDir := filepath.Join(e.Dir, e.Spec().Members[0].DataDir)
	out = e.MustFail("restore", "--force")
	if !strings.Contains(out, "has a gap") || !strings.Contains(out, fmt.Sprintf("--to-revision %d", mid.StartRevision-1)) {
		t.Errorf("restore across a gap: %s", out)
	}
	out = e.MustFail("restore", "--force", "--to-revision", fmt.Sprint(last+1000))
	if !strings.Contains(out, "outside the backed-up range") {
		t.Errorf("restore beyond the range: %s", out)
	}
	// A time after the gap: the revisions missing may have been written
	// before it (it restored up to the gap silently before).
	out = e.MustFail("restore", "--force", "--to-time", time.Now().UTC().Format(time.RFC3339Nano))
	if !strings.Contains(out, "has a gap") || !strings.Contains(out, "may have been written before it") || !strings.Contains(out, fmt.Sprintf("--to-revision %d", mid.StartRevision-1)) {
		t.Errorf("restore --to-time after a gap: %s", out)
	}
	if aside, _ := filepath.Glob(dataDir + ".pre-restore-*"); len(aside) > 0 {
		t.Errorf("refused restores moved data aside: %v", aside)
	}
	// Up to the gap is allowed, explicitly.
	e.MustRun("restore", "--force", "--to-revision", fmt.Sprint(mid.StartRevision-1))
	e.MustRun("up")
	resp, err := e.Client().Get(ctx, "round", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count == 0 {
		t.Error("nothing restored up to the gap")
	}
}

// TestS3Backup: continuous backups into a real S3 server, then every
// member's data lost and restored from the bucket, keyspace identical.
func TestS3Backup(t *testing.T) {
	t.Parallel()
	srv := harness.StartS3(t)
	e := harness.New(t)
	e.WriteSpec(3, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Backup.S3 = &spec.S3{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Prefix: "steward-e2e", CredentialsFile: srv.CredentialsFile}
	})
	e.MustRun("up")
	cli := e.Client()
	rev := loadMixed(t, cli, 4000)
	harness.WaitBackedUp(t, e, rev)
	want := workload.TakeDigest(t, cli, "", rev)
	objs, _ := filepath.Glob(filepath.Join(srv.Dir, srv.Bucket, "steward-e2e", "delta", "*.json"))
	if len(objs) == 0 {
		t.Fatal("no delta manifests in the bucket")
	}
	cli.Close()
	e.MustRun("down")
	harness.RemoveDataDirs(t, e, e.Spec().Members)
	e.MustRun("backup", "verify", "--all")
	e.MustRun("restore", "--to-revision", fmt.Sprint(want.Rev))
	e.MustRun("up")
	workload.RequireEqual(t, "restored from S3", workload.TakeDigest(t, e.Client(), "", 0), want)
}

// TestBackupGC: retention deletes older full backups with the deltas only
// they use, keeps the newest chain whole, and what is left still verifies
// and restores.
func TestBackupGC(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(1, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Backup.Retention = spec.Retention{KeepLast: 1, KeepHourly: 1, KeepDaily: 1}
	})
	e.MustRun("up")
	cli := e.Client()
	var rev int64
	for i := 0; i < 3; i++ {
		rev = putKeys(t, cli, fmt.Sprintf("gc%d/", i), 200)
		harness.WaitBackedUp(t, e, rev)
		harness.BackupNow(t, e)
	}
	rev = putKeys(t, cli, "gc-after/", 100)
	harness.WaitBackedUp(t, e, rev)
	before := harness.ListBackups(t, e)
	var plan restore.GCResult
	if err := json.Unmarshal([]byte(e.MustRun("backup", "gc", "--dry-run", "-o", "json")), &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Deleted) == 0 || len(plan.Kept) == 0 {
		t.Fatalf("gc plan deletes %d, keeps %d", len(plan.Deleted), len(plan.Kept))
	}
	after := harness.ListBackups(t, e)
	if len(after) != len(before) {
		t.Fatalf("--dry-run deleted backups: %d -> %d", len(before), len(after))
	}
	e.MustRun("backup", "gc")
	after = harness.ListBackups(t, e)
	fulls := 0
	for _, m := range after {
		if m.Kind == backup.KindFull {
			fulls++
		}
	}
	if fulls != 1 || len(after) != len(plan.Kept) {
		t.Fatalf("after gc: %d backups (%d full), plan kept %d", len(after), fulls, len(plan.Kept))
	}
	e.MustRun("backup", "verify", "--all")
	want := workload.TakeDigest(t, cli, "", rev)
	cli.Close()
	e.MustRun("down")
	e.MustRun("restore", "--force", "--to-revision", fmt.Sprint(want.Rev))
	e.MustRun("up")
	workload.RequireEqual(t, "restore after gc", workload.TakeDigest(t, e.Client(), "", 0), want)
}

// TestRecover: quorum lost with the data intact is recovered by restarting
// the members, losing nothing; quorum lost with the data gone on a majority
// is recovered from backup, and backups go on afterwards.
func TestRecover(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, harness.Versions()[1])
	putKeys(t, e.Client(), "recover/", 300)
	names := e.Spec().MemberNames()

	if !t.Run("a quorate cluster: nothing to do", func(t *testing.T) {
		e := e.For(t)
		if out := e.MustRun("recover", "-o", "json"); !strings.Contains(out, `"action": "none"`) {
			t.Errorf("recover of a quorate cluster: %s", out)
		}
	}) {
		return
	}
	if !t.Run("a majority down, data intact: restart", func(t *testing.T) {
		e := e.For(t)
		e.MustRun("member", "stop", names[0], "--force")
		e.MustRun("member", "stop", names[1], "--force")
		e.WaitStatus(30*time.Second, "quorum lost", func(st *status.Status) bool { return !st.Cluster.Quorate })
		out := e.MustRun("recover", "-o", "json")
		if !strings.Contains(out, `"action": "restart"`) {
			t.Fatalf("recover with valid data: %s", out)
		}
		e.WaitStatus(60*time.Second, "healthy after restart", harness.Healthy)
		if r, err := e.Client().Get(t.Context(), "recover/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || r.Count != 300 {
			t.Fatalf("after restart recovery: %v %v", r, err)
		}
	}) {
		return
	}
	var want workload.Digest
	var before *status.Status
	if !t.Run("a majority's data lost: refusals", func(t *testing.T) {
		e := e.For(t)
		// Every member dies and two lose their data. The third was
		// stopped before the last writes: its data is behind the newest backup,
		// so DEP-01's restore from backup is the way back (TestRecoverFromSurvivor
		// has a survivor that is not behind).
		e.MustRun("member", "stop", names[2])
		cli := e.Client(names[0], names[1])
		rev := putKeys(t, cli, "recover2/", 300)
		harness.WaitBackedUp(t, e, rev)
		want = workload.TakeDigest(t, cli, "", rev)
		cli.Close()
		before = e.Status()
		e.KillAll()
		for _, n := range names[:2] {
			m, _ := e.Spec().Member(n)
			if err := os.RemoveAll(filepath.Join(e.Dir, m.DataDir, "member", "wal")); err != nil {
				t.Fatal(err)
			}
		}
		// The agent refuses to start a member whose WAL is gone, and says so.
		if out := e.MustFail("up", "--timeout", "60s"); !strings.Contains(out, "no WAL files") {
			t.Errorf("up with lost data: %s", out)
		}
		// Another recovery in progress (its lock held): refused, nothing moved.
		held, err := filelock.TryLock(filepath.Join(e.Dir, "run", "recover.lock"))
		if err != nil {
			t.Fatal(err)
		}
		if out := e.MustFail("recover"); !strings.Contains(out, "another steward process is recovering") {
			t.Errorf("recover while another one runs: %s", out)
		}
		held.Release()
		// An upgrade plan that failed halfway (it stopped members on purpose):
		// refused until the plan is aborted, nothing moved.
		failed := &plan.Plan{ID: plan.NewID(plan.KindUpgrade, time.Now()), Kind: plan.KindUpgrade, State: plan.Failed, CreatedAt: time.Now()}
		if err := plan.SetPayload(failed, upgrade.Payload{From: before.Members[0].Version, To: "3.7.3", Strategy: "offline"}); err != nil {
			t.Fatal(err)
		}
		if err := plan.OpenStore(e.Dir).Save(t.Context(), failed); err != nil {
			t.Fatal(err)
		}
		if out := e.MustFail("recover"); !strings.Contains(out, "plan "+failed.ID+" is failed") {
			t.Errorf("recover under a failed plan: %s", out)
		}
		e.MustRun("plan", "abort")
		for _, n := range names {
			m, _ := e.Spec().Member(n)
			if aside, _ := filepath.Glob(filepath.Join(e.Dir, m.DataDir) + ".*-2*"); len(aside) > 0 {
				t.Fatalf("a refused recover moved data dirs: %v", aside)
			}
		}
	}) {
		return
	}
	t.Run("a majority's data lost: restore from backup", func(t *testing.T) {
		e := e.For(t)
		// A user's clients over every member's client URL throughout: the
		// members recover re-adds join as learners, and none may be on
		// the URL these clients use before it votes. They only read: the
		// keyspace is compared with the backup's below.
		load, probes := harness.StartLearnerWatch(t, e, e.Spec().ClientURLs(), false)
		rep, out := harness.RecoverJSON(t, e)
		if !strings.Contains(out, `"action": "restore"`) || !strings.Contains(out, "no WAL files") {
			t.Fatalf("recover with lost data: %s", out)
		}
		// DEP-01's order: the backup went into one member, a fresh full
		// snapshot was taken, and the others joined it as learners.
		if rep.Seed != names[0] || !slices.Equal(rep.Added, names[1:]) || rep.FreshBackup == "" {
			t.Fatalf("recover report: seed %q, added %v, fresh backup %q; want seed %s, then %v added", rep.Seed, rep.Added, rep.FreshBackup, names[0], names[1:])
		}
		fresh := false
		for _, m := range harness.ListBackups(t, e) {
			fresh = fresh || m.ID == rep.FreshBackup && m.Kind == backup.KindFull && m.Member == names[0]
		}
		if !fresh {
			t.Errorf("the fresh full snapshot %s of %s is not in the store", rep.FreshBackup, names[0])
		}
		st := e.WaitStatus(60*time.Second, "healthy after restore", harness.Healthy)
		harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the user's requests to succeed after the recovery", func() error {
			if ok, _ := load.Result(); ok < 100 {
				return fmt.Errorf("%d requests succeeded", ok)
			}
			if ok, _ := probes.Result(); ok < 10 {
				return fmt.Errorf("%d fresh clients' requests succeeded", ok)
			}
			return nil
		})
		load.Stop()
		probes.Stop()
		harness.RequireNoLearnerErrors(t, "recover", load, probes)
		got := workload.TakeDigest(t, e.Client(), "", 0)
		workload.RequireEqual(t, "recovered from backup", got, want)
		if got.Head <= want.Head {
			t.Fatalf("revision after the recovery %d, want above %d (the source's when its digest was read)", got.Head, want.Head)
		}
		// The cluster ID and the seed's member ID are kept (the old backups stay
		// this cluster's); the added members are new members; nobody is left a
		// learner; every replaced data dir was moved aside, not deleted.
		if st.Cluster.ID != before.Cluster.ID || st.Cluster.VotingMembers != 3 || st.Cluster.Learners != 0 {
			t.Errorf("after recovery: cluster %s (was %s), %d voters, %d learners", st.Cluster.ID, before.Cluster.ID, st.Cluster.VotingMembers, st.Cluster.Learners)
		}
		for _, n := range names {
			was, _ := before.Member(n)
			now, _ := st.Member(n)
			if (n == names[0]) != (was.ID == now.ID) {
				t.Errorf("member %s: ID %s, was %s", n, now.ID, was.ID)
			}
			m, _ := e.Spec().Member(n)
			if aside, _ := filepath.Glob(filepath.Join(e.Dir, m.DataDir) + ".*-2*"); len(aside) == 0 {
				t.Errorf("member %s: its old data dir was not moved aside", n)
			}
		}
		e.WaitStatus(30*time.Second, "backups after recovery", func(st *status.Status) bool {
			return harness.Cond(st, status.CondBackupReady).Status == "True"
		})
	})
}

// TestAutoRecovery: with recovery: auto, the agent itself restores a
// cluster whose majority lost its data, once the grace period has passed.
// It runs the oldest etcd (TestRecover runs the middle one), so that
// --force-new-cluster on a restored member is tested on both.
func TestAutoRecovery(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(3, harness.Versions()[0], func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Recovery = spec.Recovery{Mode: "auto", GracePeriodSeconds: 5}
	})
	e.MustRun("up")
	cli := e.Client()
	rev := putKeys(t, cli, "auto/", 500)
	harness.WaitBackedUp(t, e, rev)
	want := workload.TakeDigest(t, cli, "", rev)
	cli.Close()
	e.KillAll()
	harness.RemoveDataDirs(t, e, e.Spec().Members[:2])
	// The restarted agent finds the majority without data, waits out the
	// grace period and restores on its own.
	_, _, _ = e.Run("up", "--timeout", "10s")
	e.WaitStatus(3*time.Minute, "automatic recovery", harness.Healthy)
	workload.RequireEqual(t, "automatically recovered", workload.TakeDigest(t, e.Client(), "", 0), want)
	// The agent reports the recovery once the fresh full snapshot that
	// follows it is stored, which may be after the members are healthy.
	harness.Eventually(t, 60*time.Second, time.Second, "the agent log to report the automatic recovery", func() error {
		log, err := os.ReadFile(filepath.Join(e.Dir, "logs", "agent.log"))
		if err != nil {
			return err
		}
		if !strings.Contains(string(log), "automatic recovery done") {
			return fmt.Errorf("agent.log does not say %q; it ends:\n%s", "automatic recovery done", harness.LastLines(string(log), 5))
		}
		return nil
	})
}

// TestStaleBackupCampaignRevoked: after a crash the agent finds a backup
// election key of its own name on a lease it does not hold (what its
// previous process leaves, or what a restore brings back with a renewed
// TTL). It revokes that lease instead of waiting for it to expire: here the
// lease would last an hour, so without the revocation backups would not
// resume.
func TestStaleBackupCampaignRevoked(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	ctx := t.Context()
	cli := e.Client()
	harness.WaitBackedUp(t, e, putKeys(t, cli, "before/", 10))
	l, err := cli.Grant(ctx, 3600)
	if err != nil {
		t.Fatal(err)
	}
	stale := fmt.Sprintf("/steward/backup-leader/%x", l.ID)
	if _, err := cli.Put(ctx, stale, spec.LocalAgent, clientv3.WithLease(l.ID)); err != nil {
		t.Fatal(err)
	}
	cli.Close()
	e.KillAll()
	e.MustRun("up")
	cli = e.Client()
	harness.WaitBackedUp(t, e, putKeys(t, cli, "after/", 10))
	if r, err := cli.Get(ctx, stale); err != nil || r.Count != 0 {
		t.Fatalf("the stale campaign key is still there (%v, %v)", r, err)
	}
}

// TestRecoverFromSurvivor: the majority lost its data, and the one member
// that kept it holds writes made after the newest backup. Restoring the
// backup (DEP-01's way) would lose them; the recovery rebuilds the cluster
// from the survivor's own data instead, and adds the others to it.
func TestRecoverFromSurvivor(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(3, harness.Versions()[0], func(s *spec.Cluster) { s.Backup.Continuous = false })
	e.MustRun("up")
	names := e.Spec().MemberNames()
	cli := e.Client()
	putKeys(t, cli, "early/", 100)
	e.MustRun("backup", "now")
	rev := putKeys(t, cli, "late/", 100)
	want := workload.TakeDigest(t, cli, "", rev)
	cli.Close()
	before := e.Status()
	// The survivor stops cleanly (its database holds every write it
	// applied); the other two die with the host and lose their data.
	e.MustRun("member", "stop", names[2], "--force")
	e.KillAll()
	harness.RemoveDataDirs(t, e, e.Spec().Members[:2])
	_, _, _ = e.Run("up", "--timeout", "10s")
	rep, out := harness.RecoverJSON(t, e)
	if rep.Action != "reseed" || rep.Seed != names[2] || rep.RestoredFrom != "" || !slices.Equal(rep.Added, names[:2]) || rep.FreshBackup == "" {
		t.Fatalf("recover with a survivor ahead of the backup: %s", out)
	}
	st := e.WaitStatus(time.Minute, "healthy after the reseed", harness.Healthy)
	// At the newest revision: the reseed resumed above every revision
	// served, and marked the older ones compacted.
	got := workload.TakeDigest(t, e.Client(), "", 0)
	if got.Rev <= rev {
		t.Errorf("after the reseed the cluster serves revision %d, not above %d", got.Rev, rev)
	}
	if !got.Equal(want) {
		t.Fatalf("keyspace after the reseed differs from the source (writes after the backup lost?): got %s, want %s", got, want)
	}
	if st.Cluster.ID != before.Cluster.ID || st.Cluster.VotingMembers != 3 {
		t.Errorf("after the reseed: cluster %s (was %s), %d voters", st.Cluster.ID, before.Cluster.ID, st.Cluster.VotingMembers)
	}
	if was, _ := before.Member(names[2]); was.ID != st.Members[2].ID {
		t.Errorf("the survivor's member ID changed: %s, was %s", st.Members[2].ID, was.ID)
	}
}

// TestRecoverResumesAfterKill: `steward recover` is killed while it adds
// members, after its seed became a cluster of one; the seed then takes a
// write, and the host loses power. The next `steward recover` finds the
// cluster quorate (the seed alone) but the recovery unfinished: it resumes
// from the seed instead of restoring the backup again, so the write made
// after the seed took over is kept, and it adds the missing members. It
// runs the newest etcd: with TestRecover and TestAutoRecovery,
// --force-new-cluster on a restored member is tested on every version.
func TestRecoverResumesAfterKill(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(3, harness.Versions()[2], func(s *spec.Cluster) { s.Backup.Continuous = true })
	e.MustRun("up")
	names := e.Spec().MemberNames()
	// The third member stops before the writes: the one member that keeps
	// its data is behind the backup, so the recovery restores from it.
	e.MustRun("member", "stop", names[2])
	cli := e.Client(names[0], names[1])
	rev := putKeys(t, cli, "resume/", 300)
	harness.WaitBackedUp(t, e, rev)
	cli.Close()
	seedDir := filepath.Join(e.Dir, e.Spec().Members[0].DataDir)
	e.KillAll()
	harness.RemoveDataDirs(t, e, e.Spec().Members[:2])
	_, _, _ = e.Run("up", "--timeout", "10s") // the agent again; quorum is lost

	var journal []byte
	if !t.Run("recover killed while adding members", func(t *testing.T) {
		e := e.For(t)
		cmd := exec.Command(e.Bin, "recover", "--dir", e.Dir)
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = pw, pw
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pw.Close()
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		adding := make(chan string, 1)
		go func() {
			var seen strings.Builder
			buf := make([]byte, 4096)
			for {
				n, err := pr.Read(buf)
				seen.Write(buf[:n])
				if strings.Contains(seen.String(), "as a learner") {
					adding <- seen.String()
					return
				}
				if err != nil {
					adding <- ""
					return
				}
			}
		}()
		select {
		case out := <-adding:
			if out == "" {
				t.Fatal("steward recover ended before adding a member")
			}
		case <-time.After(5 * time.Minute):
			t.Fatal("steward recover did not reach the adding of members")
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		journal, err = os.ReadFile(filepath.Join(e.Dir, "status", "recovery.json"))
		if err != nil {
			t.Fatalf("no recovery journal after the seed took over: %v", err)
		}
	}) {
		return
	}
	var want workload.Digest
	if !t.Run("the seed takes a write, then the power is lost", func(t *testing.T) {
		e := e.For(t)
		// The seed serves alone and takes a write; then the host loses power.
		seedCli := e.Client(names[0])
		if _, err := seedCli.Put(t.Context(), "after/seed", "kept"); err != nil {
			t.Fatal(err)
		}
		want = workload.TakeDigest(t, seedCli, "", 0)
		seedCli.Close()
		e.KillAll()
		_, _, _ = e.Run("up", "--timeout", "10s")
		e.WaitStatus(time.Minute, "the seed quorate on its own again", func(st *status.Status) bool { return st.Cluster.Quorate })
	}) {
		return
	}
	t.Run("recover resumes from the seed", func(t *testing.T) {
		e := e.For(t)
		rep, _ := harness.RecoverJSON(t, e)
		if rep.Action != "resume" || rep.Seed != names[0] || !strings.Contains(string(journal), rep.RestoredFrom) || len(rep.Added) == 0 {
			t.Fatalf("second recover: action %q, seed %q, restored from %q, added %v; want a resume of the journal %s", rep.Action, rep.Seed, rep.RestoredFrom, rep.Added, journal)
		}
		if aside, _ := filepath.Glob(seedDir + ".*-2*"); len(aside) > 0 {
			t.Fatalf("the seed was restored again (its data dir moved aside: %v)", aside)
		}
		if _, err := os.Stat(filepath.Join(e.Dir, "status", "recovery.json")); !os.IsNotExist(err) {
			t.Errorf("the recovery journal is still there after the recovery finished: %v", err)
		}
		st := e.WaitStatus(time.Minute, "all members promoted", harness.Healthy)
		if st.Cluster.VotingMembers != 3 {
			t.Errorf("%d voting members after the resume, want 3", st.Cluster.VotingMembers)
		}
		got := workload.TakeDigest(t, e.Client(), "", 0)
		workload.RequireEqual(t, "after the resume, against the seed's before the power loss", got, want)
		if got.Head < want.Head {
			t.Fatalf("revision %d after the resume, %d before the power loss", got.Head, want.Head)
		}
		if again := e.MustRun("recover", "-o", "json"); !strings.Contains(again, `"action": "none"`) {
			t.Errorf("a third recover: %s", again)
		}
	})
}

// TestBackupAcrossLeaderChanges: leadership moves several times while a
// client writes; the delta chain stays contiguous (no gap, overlaps trimmed)
// and a restore reproduces the keyspace exactly.
func TestBackupAcrossLeaderChanges(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, harness.Versions()[1])
	cli := e.Client()
	w := workload.Start(t, cli, workload.Options{Prefix: "moves"})
	names := e.Spec().MemberNames()
	for i := 0; i < 4; i++ {
		st := e.Status()
		for _, n := range names {
			if n != st.Cluster.Leader {
				e.MustRun("leader", "move", "--to", n)
				break
			}
		}
	}
	res := w.Stop()
	t.Log(res)
	harness.WaitBackedUp(t, e, res.MaxRev)
	want := workload.TakeDigest(t, cli, "", res.MaxRev)
	e.MustRun("backup", "verify", "--all")
	cli.Close()
	e.MustRun("down")
	e.MustRun("restore", "--force", "--to-revision", fmt.Sprint(want.Rev))
	e.MustRun("up")
	restored := e.Client()
	workload.RequireEqual(t, "restore after leader changes", workload.TakeDigest(t, restored, "", 0), want)
	workload.RequireKeys(t, restored, res)
}

// TestBackupLeaderHandover: two agents (two processes, as on two hosts)
// share a cluster; the backup leader is the agent that runs the etcd
// leader. Leadership moves between their members while a client writes:
// each agent records in turn, no two segments hold the same revision (one
// recorder at a time), the chain has no gap, and the restore is exact.
func TestBackupLeaderHandover(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(3, harness.Versions()[1], func(s *spec.Cluster) {
		s.Backup.Continuous = true
		s.Agents = append(s.Agents, spec.Agent{Name: "second", Address: "unix://" + filepath.Join(e.Dir, "run", "agent-second.sock")})
		s.Members[2].Agent = "second"
	})
	// The second agent, started as it would be on its own host.
	if err := os.MkdirAll(filepath.Join(e.Dir, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(e.Dir, "logs", "agent-second.log"))
	if err != nil {
		t.Fatal(err)
	}
	second := exec.Command(e.Bin, "agent", "--dir", e.Dir, "--name", "second")
	second.Stdout, second.Stderr = logf, logf
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = second.Wait(); close(exited) }()
	t.Cleanup(func() {
		if a, err := agentapi.NewClient(e.Spec().Agents[1].Address); err == nil {
			_ = a.Shutdown(context.Background())
		}
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = second.Process.Kill()
			<-exited
		}
	})
	a2, err := agentapi.NewClient("unix://" + filepath.Join(e.Dir, "run", "agent-second.sock"))
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 15*time.Second, 100*time.Millisecond, "the second agent to answer", func() error {
		return a2.Ping(t.Context(), time.Second)
	})
	e.MustRun("up")

	cli := e.Client()
	ctx := t.Context()
	// Two keys per transaction: one revision, two keys, across handovers.
	w := workload.Start(t, cli, workload.Options{Prefix: "handover", KeysPerWrite: 2})
	names := e.Spec().MemberNames()
	// Leader to the second agent's member, back to the local agent, and again.
	for _, to := range []string{names[2], names[0], names[2], names[1]} {
		if e.Status().Cluster.Leader != to {
			e.MustRun("leader", "move", "--to", to)
		}
		// The new backup leader takes over: a segment recorded from the new
		// leader's member reaches the store.
		moved := time.Now()
		harness.Eventually(t, 60*time.Second, 100*time.Millisecond, "a delta recorded from "+to+" after the leader move", func() error {
			ms := harness.ListBackups(t, e)
			by := map[string]int{}
			for _, m := range ms {
				if m.Kind == backup.KindDelta && m.CreatedAt.After(moved) {
					if m.Member == to {
						return nil
					}
					by[m.Member]++
				}
			}
			return fmt.Errorf("deltas since the move, by member: %v (%d backups in all)", by, len(ms))
		})
	}
	res := w.Stop()
	t.Log(res)
	rev := res.MaxRev
	harness.WaitBackedUp(t, e, rev)
	ms := harness.ListBackups(t, e)
	by := map[string]int{}
	for _, m := range ms {
		if m.Kind == backup.KindDelta {
			by[m.Member]++
		}
	}
	if by[names[2]] == 0 || by[names[0]]+by[names[1]] == 0 {
		t.Fatalf("deltas by member %v: both agents must have recorded", by)
	}
	// One recorder at a time: no two segments hold the same revision.
	var deltas []backup.Manifest
	for _, m := range ms {
		if m.Kind == backup.KindDelta {
			deltas = append(deltas, m)
		}
	}
	sort.Slice(deltas, func(i, j int) bool { return deltas[i].StartRevision < deltas[j].StartRevision })
	for i := 1; i < len(deltas); i++ {
		if p, d := deltas[i-1], deltas[i]; d.StartRevision <= p.EndRevision {
			t.Fatalf("overlapping segments: %s (from %s) and %s (from %s)", p.ID, p.Member, d.ID, d.Member)
		}
	}
	want := workload.TakeDigest(t, cli, "", rev)
	e.MustRun("backup", "verify", "--all")
	cli.Close()
	e.MustRun("down")
	if _, err := a2.Stop(ctx, names[2]); err != nil {
		t.Fatal(err)
	}
	e.MustRun("restore", "--force", "--to-revision", fmt.Sprint(want.Rev))
	if _, err := a2.Start(ctx, names[2]); err != nil {
		t.Fatal(err)
	}
	e.MustRun("up")
	restored := e.Client()
	workload.RequireEqual(t, "restore after handovers", workload.TakeDigest(t, restored, "", 0), want)
	workload.RequireKeys(t, restored, res)
}

// TestBackupCompactionAndTime: when the revision the backup leader must
// continue from is compacted away (its agent was down meanwhile), it takes a
// new full snapshot instead of leaving a silent gap; and restore --to-time
// returns the keyspace as it was at a moment between two writes.
func TestBackupCompactionAndTime(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[1])
	cli := e.Client()
	ctx := t.Context()
	rev := putKeys(t, cli, "before/", 50)
	harness.WaitBackedUp(t, e, rev)
	time.Sleep(1100 * time.Millisecond) // a gap in wall time to restore into, not synchronisation
	between := time.Now()
	time.Sleep(1100 * time.Millisecond)
	rev = putKeys(t, cli, "after/", 50)
	harness.WaitBackedUp(t, e, rev)

	// Backups stop (the agent dies and comes back with them off); writes
	// go on and are compacted away.
	e.KillAll()
	sp := e.Spec()
	sp.Backup.Continuous = false
	if err := sp.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	e.MustRun("down")
	e.MustRun("up")
	cli = e.Client()
	if _, err := cli.Put(ctx, "while-off/1", "x"); err != nil {
		t.Fatal(err)
	}
	r, err := cli.Put(ctx, "while-off/2", "x")
	if err != nil {
		t.Fatal(err)
	}
	// Compacting at the second write removes the first: the revision the
	// chain must continue from is gone.
	compacted := r.Header.Revision
	if _, err := cli.Compact(ctx, compacted, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	// Backups on again: the loop cannot continue its chain and takes a full
	// snapshot.
	sp.Backup.Continuous = true
	if err := sp.Save(filepath.Join(e.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	rev = putKeys(t, cli, "later/", 20)
	harness.WaitBackedUp(t, e, rev)
	ms := harness.ListBackups(t, e)
	fullAfter := false
	for _, m := range ms {
		fullAfter = fullAfter || m.Kind == backup.KindFull && m.EndRevision >= compacted
	}
	if !fullAfter {
		t.Fatalf("no full snapshot at or after the compacted revision %d", compacted)
	}
	e.MustRun("backup", "verify", "--all")

	cli.Close()
	e.MustRun("down")
	e.MustRun("restore", "--force", "--to-time", between.UTC().Format(time.RFC3339Nano))
	e.MustRun("up")
	cli = e.Client()
	b, _ := cli.Get(ctx, "before/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	a, _ := cli.Get(ctx, "after/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if b.Count != 50 || a.Count != 0 {
		t.Fatalf("restore --to-time: %d before/ keys (want 50), %d after/ keys (want 0)", b.Count, a.Count)
	}
}
