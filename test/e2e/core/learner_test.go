package core_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestLearnerNeverOnClientURL runs a user's client over every client URL,
// including the one a member about to be added will have, through `member
// add` and `member replace`: a member serves clients only once it votes,
// so no request meets "rpc not supported for learner".
func TestLearnerNeverOnClientURL(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	v := vs[len(vs)-1]
	e := harness.New(t)
	e.Up(3, v)
	// Some data, so that a learner takes a moment to catch up.
	seed := e.Client()
	for i := range 200 {
		if _, err := seed.Put(t.Context(), fmt.Sprintf("seed/%d", i), strings.Repeat("x", 4096)); err != nil {
			t.Fatal(err)
		}
	}
	s := e.Spec()
	newURL := e.URL(s.Scheme(), e.FreePorts(1)[0])
	eps := s.ClientURLs()
	// The user's client already knows the URL the new member gets; a
	// fresh client per request on each URL (as a user running etcdctl
	// does) connects at once, without a long-lived client's reconnect
	// back-off.
	eps = append(eps, newURL)
	load, fresh := harness.StartLearnerWatch(t, e, eps, true)
	started := time.Now()
	e.MustRun("member", "add", "m4", "--client-url", newURL)
	afterAdd, _ := load.Result()
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the user's requests to succeed after the add", func() error {
		if ok, _ := load.Result(); ok < afterAdd+100 {
			return fmt.Errorf("%d requests succeeded since the add", ok-afterAdd)
		}
		return nil
	})
	replaced := s.Members[1].Name
	e.MustRun("member", "replace", replaced)
	e.WaitStatus(60*time.Second, "4 healthy voting members", func(st *status.Status) bool {
		return harness.Healthy(st) && st.Cluster.VotingMembers == 4 && st.Cluster.Learners == 0
	})
	load.Stop()
	fresh.Stop()
	t.Logf("add and replace took %s", time.Since(started).Round(time.Millisecond))
	harness.RequireNoLearnerErrors(t, "member add and replace", load, fresh)
}

// TestJoinAfterFailedBootstrap: a member joining a cluster whose peers do
// not answer its first start exits during etcd's bootstrap, leaving a
// member dir without a WAL. Its agent clears that (the data dir was empty
// when it started) and the next start joins once the peers are back,
// where before the agent refused every later start ("no WAL files in
// member/wal") and only a manual cleanup got the member going.
func TestJoinAfterFailedBootstrap(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(1, harness.Versions()[0])
	ctx := t.Context()
	c, err := cluster.Open(e.Dir)
	if err != nil {
		t.Fatal(err)
	}
	first := c.Spec.Members[0]
	ports := e.FreePorts(2)
	scheme := c.Spec.Scheme()
	peerURL := e.URL(scheme, ports[1])
	joiner := spec.Member{
		Name: "etcd-2", Agent: first.Agent, DataDir: "members/etcd-2/data",
		ClientURL: e.URL(scheme, ports[0]),
		PeerURL:   peerURL,
		Bootstrap: &spec.Bootstrap{InitialCluster: first.Name + "=" + first.PeerURL + ",etcd-2=" + peerURL},
	}
	cli := e.Client()
	if _, err := cli.MemberAddAsLearner(ctx, []string{joiner.PeerURL}); err != nil {
		t.Fatal(err)
	}
	next := c.Spec.Clone()
	next.Members = append(next.Members, joiner)
	if err := c.SaveSpec(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := c.EnsureCerts(); err != nil {
		t.Fatal(err)
	}
	// The only peer the joiner knows is down when it first starts.
	e.MustRun("member", "stop", first.Name, "--force")
	ac, err := c.Agent(first.Agent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.PutMember(ctx, c.MemberConfig(joiner)); err != nil {
		t.Fatal(err)
	}
	if _, err := ac.Start(ctx, joiner.Name); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, 100*time.Millisecond, "the joiner to exit during its bootstrap", func() error {
		ms, err := ac.Member(ctx, joiner.Name)
		if err != nil {
			return err
		}
		if ms.Restarts < 1 {
			return fmt.Errorf("state %s, no exit yet", ms.State)
		}
		// etcd's own reason, from its log: it could not reach its peer.
		if !strings.Contains(ms.LastExit, "cannot fetch cluster info") {
			t.Fatalf("the joiner exited for another reason than an unreachable peer: %s", ms.LastExit)
		}
		return nil
	})
	e.MustRun("member", "start", first.Name)
	harness.Eventually(t, 2*time.Minute, 200*time.Millisecond, "the joiner to join once its peer is back", func() error {
		ms, err := ac.Member(ctx, joiner.Name)
		if err != nil {
			return err
		}
		if strings.Contains(ms.LastError, "refusing to start") {
			t.Fatalf("the agent refused to start the joiner again: %s", ms.LastError)
		}
		if ms.State != agentapi.StateRunning {
			return fmt.Errorf("state %s, restarts %d, last exit %q, last error %q", ms.State, ms.Restarts, ms.LastExit, ms.LastError)
		}
		return nil
	})
	harness.Eventually(t, time.Minute, 300*time.Millisecond, "the learner's promotion", func() error {
		list, err := cli.MemberList(ctx)
		if err != nil {
			return err
		}
		for _, m := range list.Members {
			if slices.Contains(m.PeerURLs, joiner.PeerURL) {
				_, err := cli.MemberPromote(ctx, m.ID)
				return err
			}
		}
		return fmt.Errorf("no member with peer URL %s", joiner.PeerURL)
	})
	st := e.WaitStatus(time.Minute, "both members healthy", harness.Healthy)
	if st.Cluster.VotingMembers != 2 {
		t.Fatalf("%d voting members after the join, want 2", st.Cluster.VotingMembers)
	}
}

// TestJoinRefusedDuringDowngrade: while etcd's downgrade is enabled etcd
// lets no member join (a joiner's peers accept only a cluster version one
// minor above its binary's), so `member add` and `member replace` refuse
// before they change anything: the spec, etcd's member list, the member
// replaced (its process and data dir) stay as they were. Once the
// downgrade is cancelled the replace goes through.
func TestJoinRefusedDuringDowngrade(t *testing.T) {
	t.Parallel()
	vs := harness.Versions()
	if len(vs) < 2 {
		t.Fatalf("need two test versions, have %v", vs)
	}
	e := harness.New(t)
	e.Up(3, vs[1])
	ctx := t.Context()
	cli := e.Client()
	target := strings.Join(strings.Split(vs[0], ".")[:2], ".")
	if _, err := cli.Downgrade(ctx, clientv3.DowngradeValidate, target); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Downgrade(ctx, clientv3.DowngradeEnable, target); err != nil {
		t.Fatal(err)
	}
	victim := e.Spec().Members[1]
	before, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pid := e.MemberPID(victim.Name)
	for _, args := range [][]string{{"member", "replace", victim.Name}, {"member", "add", "etcd-4"}} {
		out := e.MustFail(args...)
		// Enabled by hand, not by a plan: the refusal says how to end it.
		if !strings.Contains(out, "downgrade to "+target) || !strings.Contains(out, "etcdctl downgrade cancel") {
			t.Errorf("steward %s: the refusal does not name the downgrade and what to do:\n%s", strings.Join(args, " "), out)
		}
	}
	after, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Members) != len(before.Members) {
		t.Fatalf("etcd has %d members after the refusals, had %d", len(after.Members), len(before.Members))
	}
	for i := range before.Members {
		if before.Members[i].ID != after.Members[i].ID {
			t.Fatalf("etcd's members changed: %v, then %v", before.Members, after.Members)
		}
	}
	if n := len(e.Spec().Members); n != 3 {
		t.Fatalf("the spec has %d members after the refusals, want 3", n)
	}
	if p := e.MemberPID(victim.Name); p != pid {
		t.Fatalf("%s was restarted or stopped (pid %d, then %d)", victim.Name, pid, p)
	}
	if wals, _ := filepath.Glob(filepath.Join(e.Dir, victim.DataDir, "member", "wal", "*.wal")); len(wals) == 0 {
		t.Fatalf("%s's data dir has no WAL file after the refused replace (moved aside?)", victim.Name)
	}

	if _, err := cli.Downgrade(ctx, clientv3.DowngradeCancel, ""); err != nil {
		t.Fatal(err)
	}
	e.WaitStatus(time.Minute, "no member reporting the downgrade", func(st *status.Status) bool {
		for _, m := range st.Members {
			if m.DowngradeTarget != "" {
				return false
			}
		}
		return harness.Healthy(st)
	})
	e.MustRun("member", "replace", victim.Name)
	if st := e.WaitStatus(time.Minute, "the replaced member healthy", harness.Healthy); st.Cluster.VotingMembers != 3 {
		t.Fatalf("%d voting members after the replace, want 3", st.Cluster.VotingMembers)
	}
}
