package core_test

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestBootstrapOneMember: a one-member cluster of each version starts, keeps
// its data across down and up, and leaves no process behind.
func TestBootstrapOneMember(t *testing.T) {
	t.Parallel()
	for _, v := range harness.Versions() {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			e := harness.New(t)
			e.Up(1, v)
			st := e.Status()
			if len(st.Members) != 1 {
				t.Fatalf("want 1 member, got %d", len(st.Members))
			}
			m := st.Members[0]
			if m.Role != "leader" || !m.Healthy || m.Version != v || m.Process != "Running" {
				t.Fatalf("member: role %s healthy %v version %s process %s; want leader true %s Running", m.Role, m.Healthy, m.Version, m.Process, v)
			}
			if st.Cluster.Version != harness.Minor(v)+".0" {
				t.Errorf("cluster version %q, want %s.0", st.Cluster.Version, harness.Minor(v))
			}
			if !strings.HasPrefix(m.ClientURLs[0], "https://") {
				t.Errorf("client URL %s: TLS must be on by default", m.ClientURLs[0])
			}
			cli := e.Client()
			ctx := t.Context()
			if _, err := cli.Put(ctx, "survives", "down-and-up"); err != nil {
				t.Fatal(err)
			}
			cli.Close()

			e.MustRun("down")
			if left := harness.ProcessesUsing(e.Dir); len(left) > 0 {
				t.Fatalf("processes left after down: %v", left)
			}
			// A spec edit made while the cluster is down applies on up.
			s := e.Spec()
			s.Etcd.SnapshotCount = 4321
			if err := s.Save(filepath.Join(e.Dir, "cluster.yaml")); err != nil {
				t.Fatal(err)
			}
			e.MustRun("up")
			cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", e.MemberPID(s.Members[0].Name)))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(cmdline), "--snapshot-count=4321") {
				t.Errorf("spec edit not applied on up: %q", cmdline)
			}
			resp, err := e.Client().Get(ctx, "survives")
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "down-and-up" {
				t.Fatalf("key lost across down/up: %v", resp.Kvs)
			}
			if got := e.Status().Members[0].DataDirVersion; got != v {
				t.Errorf("data dir version record %q, want %s", got, v)
			}
			// up on the running cluster starts nothing, and says so.
			if _, se, err := e.Run("up"); err != nil || !strings.Contains(se, "member "+s.Members[0].Name+" was already running") || strings.Contains(se, "started member") {
				t.Errorf("up on a running cluster: %v; want it to say the member was already running:\n%s", err, se)
			}
		})
	}
}

// TestThreeMembers runs, for each version, a three-member cluster through
// bootstrap, TLS checks, kill -9 of a member, the status conditions while a
// minority and then a majority is down, and replacing a member whose data
// dir was deleted.
func TestThreeMembers(t *testing.T) {
	t.Parallel()
	for _, v := range harness.Versions() {
		t.Run(v, func(t *testing.T) {
			t.Parallel()
			e := harness.New(t)
			e.Up(3, v)
			// Each phase builds on the cluster the one before left: the
			// first failure ends the test.
			for _, p := range []struct {
				name  string
				check func(t *testing.T, e *harness.Env)
			}{
				{"bootstrapped", func(t *testing.T, e *harness.Env) { checkBootstrapped(t, e.Status(), v) }},
				{"TLS", func(t *testing.T, e *harness.Env) { checkTLS(t, e, v) }},
				{"kill -9 of a member", checkKill9},
				{"conditions with members down", checkConditions},
				{"replace a member that lost its data", checkReplace},
			} {
				if !t.Run(p.name, func(t *testing.T) { p.check(t, e.For(t)) }) {
					return
				}
			}
		})
	}
}

func checkBootstrapped(t *testing.T, st *status.Status, v string) {
	t.Helper()
	if !harness.Healthy(st) || len(st.Members) != 3 {
		t.Fatalf("want 3 healthy members, got %d healthy of %d", st.Cluster.HealthyMembers, len(st.Members))
	}
	leaders := 0
	for _, m := range st.Members {
		if m.Role == "leader" {
			leaders++
		}
		if m.Version != v || m.ID == "" || m.RaftTerm == 0 || m.RaftAppliedIndex == 0 || m.DBSize == 0 || m.Revision < 1 {
			t.Errorf("member %s: incomplete status %+v", m.Name, m)
		}
	}
	if leaders != 1 || st.Cluster.Leader == "" {
		t.Errorf("want exactly one leader, got %d (cluster leader %q)", leaders, st.Cluster.Leader)
	}
	if st.Cluster.ID == "" || st.Cluster.Version != harness.Minor(v)+".0" || !st.Cluster.Quorate {
		t.Errorf("cluster: %+v", st.Cluster)
	}
	if harness.Minor(v) != "3.5" && st.Cluster.StorageVersion == "" {
		t.Errorf("etcd %s reports a storage version; status has none", v)
	}
	for typ, want := range map[string]string{status.CondReady: "True", status.CondAllMembersReady: "True", status.CondBackupReady: "True"} {
		c := harness.Cond(st, typ)
		if c.Status != want || c.Reason == "" || c.LastTransitionTime.IsZero() {
			t.Errorf("condition %s: %+v, want status %s with reason and time", typ, c, want)
		}
	}
}

func checkTLS(t *testing.T, e *harness.Env, v string) {
	t.Helper()
	s := e.Spec()
	for _, f := range []string{"ca.key", "server.key", "peer.key", "client.key"} {
		fi, err := os.Stat(filepath.Join(s.CertDir(e.Dir), f))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %o, want 0600", f, fi.Mode().Perm())
		}
	}
	for _, m := range s.Members {
		fi, err := os.Stat(filepath.Join(e.Dir, m.DataDir))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("data dir of %s has mode %o, want 0700", m.Name, fi.Mode().Perm())
		}
	}
	ep := s.Members[0].ClientURL
	// Plain HTTP is refused.
	plain := strings.Replace(ep, "https://", "http://", 1)
	if resp, err := (&http.Client{Timeout: 3 * time.Second}).Get(plain + "/version"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Errorf("plain HTTP to %s answered 200", plain)
		}
	}
	// TLS without a client certificate is refused.
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if resp, err := hc.Get(ep + "/version"); err == nil {
		resp.Body.Close()
		t.Errorf("TLS without client certificate to %s answered %s", ep, resp.Status)
	}
	// etcdctl works with what `steward env` prints.
	env := e.MustRun("env")
	cmd := exec.Command(filepath.Join(e.Store, "etcd-v"+v, "etcdctl"), "endpoint", "health", "--cluster")
	cmd.Env = os.Environ()
	for _, line := range strings.Split(strings.TrimSpace(env), "\n") {
		kv := strings.TrimPrefix(line, "export ")
		cmd.Env = append(cmd.Env, kv)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("etcdctl with steward env: %v\n%s", err, out)
	} else if strings.Count(string(out), "is healthy") != 3 {
		t.Errorf("etcdctl endpoint health: want 3 healthy endpoints:\n%s", out)
	}
}

func checkKill9(t *testing.T, e *harness.Env) {
	t.Helper()
	victim := e.Spec().Members[1].Name
	pid := e.MemberPID(victim)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.WaitStatus(60*time.Second, victim+" restarted by the agent", func(st *status.Status) bool {
		m, _ := st.Member(victim)
		return m.Healthy && m.Restarts >= 1 && m.PID != 0 && m.PID != pid && harness.Healthy(st)
	})
}

func checkConditions(t *testing.T, e *harness.Env) {
	t.Helper()
	names := e.Spec().MemberNames()
	before := harness.Cond(e.Status(), status.CondAllMembersReady).LastTransitionTime

	// Stopping the leader hands leadership over first: another member
	// leads the moment the command returns, with no election to wait for.
	if e.Status().Cluster.Leader != names[0] {
		e.MustRun("leader", "move", "--to", names[0])
	}
	if so, se, err := e.Run("member", "stop", names[0]); err != nil || !strings.Contains(so+se, "moving leadership to") {
		t.Errorf("stop of the leader did not move leadership first: %v\n%s%s", err, so, se)
	}
	if l := e.Status().Cluster.Leader; l == "" || l == names[0] {
		t.Errorf("right after stopping the leader %s, the leader is %q", names[0], l)
	}
	st := e.WaitStatus(30*time.Second, "minority down", func(st *status.Status) bool {
		return harness.Cond(st, status.CondAllMembersReady).Status == "False"
	})
	ready, all := harness.Cond(st, status.CondReady), harness.Cond(st, status.CondAllMembersReady)
	if ready.Status != "True" || ready.Reason != "Quorate" {
		t.Errorf("one of three down: Ready %+v, want True/Quorate", ready)
	}
	if all.Reason != "NotAllMembersReady" || !strings.Contains(all.Message, names[0]) {
		t.Errorf("AllMembersReady %+v: want NotAllMembersReady naming %s", all, names[0])
	}
	if all.LastTransitionTime.Before(before) {
		t.Errorf("AllMembersReady lastTransitionTime went backwards: %s < %s", all.LastTransitionTime, before)
	}
	if m, _ := st.Member(names[0]); m.Healthy || m.Process != "Stopped" || m.LastError == "" {
		t.Errorf("stopped member: %+v", m)
	}

	// A write while names[0] is down: its data dir falls behind the backups.
	wr, err := e.Client(names[1], names[2]).Put(t.Context(), "while/"+names[0]+"/down", "x")
	if err != nil {
		t.Fatal(err)
	}
	harness.WaitBackedUp(t, e, wr.Header.Revision)
	if out := e.MustFail("member", "stop", names[1]); !strings.Contains(out, "refusing to stop "+names[1]) {
		t.Errorf("stop that loses quorum: %s", out)
	}
	e.MustRun("member", "stop", names[1], "--force")
	st = e.WaitStatus(30*time.Second, "majority down", func(st *status.Status) bool {
		return harness.Cond(st, status.CondReady).Status == "False"
	})
	if r := harness.Cond(st, status.CondReady); r.Reason != "QuorumLost" {
		t.Errorf("two of three down: Ready %+v, want False/QuorumLost", r)
	}
	if st.Cluster.Quorate {
		t.Errorf("two of three down: quorate = true")
	}

	e.MustRun("member", "start", names[0])
	e.MustRun("member", "start", names[1])
	e.WaitStatus(60*time.Second, "all members back", harness.Healthy)
	// The agent's check before the restart saw the data dir behind the backups.
	a, err := agentapi.NewClient(e.Spec().Agents[0].Address)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := a.Member(t.Context(), names[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ms.DataDirCheck, "valid") || !strings.Contains(ms.DataDirCheck, "behind the newest backup") {
		t.Errorf("data dir check of %s after it missed writes: %q", names[0], ms.DataDirCheck)
	}
}

func checkReplace(t *testing.T, e *harness.Env) {
	t.Helper()
	ctx := t.Context()
	cli := e.Client()
	for i := 0; i < 100; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("replace/%03d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	s := e.Spec()
	victim := s.Members[2]
	e.MustRun("member", "stop", victim.Name)
	if err := os.RemoveAll(filepath.Join(e.Dir, victim.DataDir)); err != nil {
		t.Fatal(err)
	}
	out := e.MustFail("member", "replace", "no-such-member")
	if !strings.Contains(out, `no member named "no-such-member"`) {
		t.Errorf("replace of unknown member: %s", out)
	}
	e.MustRun("member", "replace", victim.Name)
	st := e.WaitStatus(60*time.Second, "replaced member healthy", harness.Healthy)
	if len(st.Members) != 3 || st.Cluster.VotingMembers != 3 {
		t.Fatalf("after replace: %d members, %d voting", len(st.Members), st.Cluster.VotingMembers)
	}
	// The new member holds the data: read it from that member alone.
	one := e.Client(victim.Name)
	resp, err := one.Get(ctx, "replace/", clientWithPrefixSerializable()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 100 {
		t.Fatalf("replaced member has %d of 100 keys", len(resp.Kvs))
	}
}

// clientWithPrefixSerializable are the options of a get of every key under
// a prefix, answered by the member asked alone.
func clientWithPrefixSerializable() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSerializable()}
}
