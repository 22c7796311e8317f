package hosts_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestHostsAutoRecovery: recovery.mode auto on three hosts (S3 backups),
// where the coordinator's own process (`certs renew --watch`, which `up`
// starts) is the one actor (docs/hosts.md, "Automatic recovery across
// hosts"). A follower's host cut off alone: the majority stays quorate and
// nothing recovers anywhere; healed, the member rejoins. Two hosts cut off:
// the coordinator sees quorum lost but cannot reach their agents, so it
// waits and says why; healed, quorum is back with no recovery. Two hosts
// lose their data dirs while their agents run: with no command, the
// coordinator recovers (its agents report the two members not running)
// and the cluster is healthy with the exact keyspace; status shows the
// action and its reason. Then every data dir is lost: no member's data
// survives, so the coordinator restores the backups from S3 across the
// hosts, with the exact keyspace of the newest backup and no revision
// going backwards for a watcher. No host's agent ever acts.
func TestHostsAutoRecovery(t *testing.T) {
	t.Parallel()
	hs := harness.NewHosts(t, 3)
	s3 := harness.StartS3At(t, hs.Net.Addr)
	hs.Init("3.6.16", "--backup-s3-endpoint", s3.Endpoint, "--backup-s3-bucket", s3.Bucket,
		"--backup-s3-credentials-file", s3.CredentialsFile, "--backup-s3-prefix", "autorec")
	s := hs.Spec()
	s.Recovery = spec.Recovery{Mode: "auto", GracePeriodSeconds: 5}
	// Each host's agent serves metrics on its host's address (HTTPS):
	// the coordinator runs no agent, and pushes its recovery counts to
	// them.
	for i := range s.Agents {
		s.Agents[i].MetricsAddress = net.JoinHostPort(hs.Host(s.Agents[i].Name).Addr, "9379")
	}
	if err := s.Save(filepath.Join(hs.Dir, spec.FileName)); err != nil {
		t.Fatal(err)
	}
	hs.StartAgents()
	// A host whose agent cannot be asked whether it leaves the recovery
	// to the coordinator: `up` is refused naming it, before anything
	// starts.
	specBefore, err := os.ReadFile(filepath.Join(hs.Dir, spec.FileName))
	if err != nil {
		t.Fatal(err)
	}
	hs.Host("h1").Cut(t)
	msg := hs.MustFail("up")
	hs.Host("h1").Heal(t)
	for _, want := range []string{"recovery.mode auto", "host h1 (" + hs.Host("h1").Addr + ")", "nothing was changed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("up with h1 cut off: %q lacks %q", msg, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(hs.Dir, spec.FileName)); string(b) != string(specBefore) {
		t.Errorf("the refused up changed the spec")
	}
	for _, h := range hs.Hosts {
		if _, err := os.Stat(filepath.Join(h.Dir, "members")); err == nil {
			t.Errorf("the refused up started a member on host %s", h.Name)
		}
	}
	if _, err := os.Stat(filepath.Join(hs.Dir, "run", "certrenew.pid")); err == nil {
		t.Errorf("the refused up started the coordinator's process")
	}
	if so, se, err := hs.Run("up"); err != nil || !strings.Contains(se, "started certificate renewal of the hosts") {
		t.Fatalf("up: %v; want the coordinator's process started\nstdout: %s\nstderr: %s", err, so, se)
	}
	hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
	grace := 5 * time.Second

	// noHostActs: no host's agent recorded a decision or a journal.
	noHostActs := func(t *testing.T) {
		t.Helper()
		for _, h := range hs.Hosts {
			for _, f := range []string{status.AutoRecoveryStateFile, "recovery.json"} {
				if _, err := os.Stat(filepath.Join(h.Dir, "status", f)); err == nil {
					t.Errorf("host %s has status/%s: a host's agent took part in the recovery", h.Name, f)
				}
			}
		}
	}
	// noAction polls for d that the coordinator ran no recovery.
	noAction := func(t *testing.T, d time.Duration) *status.AutoRecoveryState {
		t.Helper()
		var last *status.AutoRecoveryState
		err := harness.Poll(d, 500*time.Millisecond, func() error {
			st, err := status.ReadAutoRecovery(hs.Dir)
			if err != nil {
				t.Fatal(err)
			}
			if st != nil && st.LastAction != nil {
				t.Fatalf("a recovery ran: %+v", st.LastAction)
			}
			last = st
			return fmt.Errorf("still no action") // keep polling for d
		})
		if err == nil {
			t.Fatal("poll ended early")
		}
		return last
	}
	memberIDs := func(st *status.Status) map[string]string {
		ids := map[string]string{}
		for _, m := range st.Members {
			ids[m.Name] = m.ID
		}
		return ids
	}

	cli := hs.Client()
	for i := range 200 {
		if _, err := cli.Put(t.Context(), fmt.Sprintf("autorec/%03d", i), strings.Repeat("v", 100)); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a host cut off alone: no recovery, it rejoins", func(t *testing.T) {
		e := hs.Env.For(t)
		st := e.Status()
		before := memberIDs(st)
		var victim status.MemberStatus
		for _, m := range st.Members {
			if m.Role == "follower" {
				victim = m
				break
			}
		}
		h := hs.Host(victim.Agent)
		h.Cut(t)
		e.WaitStatus(30*time.Second, "the cut host reported, quorum kept", func(st *status.Status) bool {
			return harness.Cond(st, status.CondReady).Status == "True" && harness.Cond(st, status.CondAllMembersReady).Status == "False"
		})
		if st := noAction(t, 4*grace); st == nil || st.Decision != "none" {
			t.Errorf("decision with the majority quorate: %+v", st)
		}
		h.Heal(t)
		st = e.WaitStatus(time.Minute, "the cut host's member back", harness.Healthy)
		if after := memberIDs(st); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("member IDs changed: %v, were %v", after, before)
		}
		noHostActs(t)
		// The hosts' loops (the backup loop's status every 2 s on the
		// hosts that do not record) never knocked at another agent's API
		// with their host certificate, which it refuses.
		for _, h := range hs.Hosts {
			b, err := os.ReadFile(filepath.Join(h.Dir, "logs", "agent-"+h.Name+".log"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), "may not use the agent API"); n > 0 {
				t.Errorf("host %s's agent refused a client certificate %d times (\"may not use the agent API\")", h.Name, n)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("two hosts cut off: the coordinator cannot prove quorum lost, it waits", func(t *testing.T) {
		e := hs.Env.For(t)
		before := memberIDs(e.Status())
		cut := []*harness.AgentHost{hs.Hosts[0], hs.Hosts[1]}
		for _, h := range cut {
			h.Cut(t)
		}
		e.WaitStatus(30*time.Second, "quorum lost as seen from the coordinator", func(st *status.Status) bool { return !st.Cluster.Quorate })
		st := noAction(t, 4*grace)
		if st == nil || st.Decision != "wait" || !strings.Contains(st.Reason, "do not answer") {
			t.Errorf("decision with two hosts unreachable: %+v", st)
		}
		// status says so in Ready's message.
		if c := harness.Cond(e.Status(), status.CondReady); !strings.Contains(c.Message, "automatic recovery (wait") || !strings.Contains(c.Message, "do not answer") {
			t.Errorf("Ready: %+v", c)
		}
		for _, h := range cut {
			h.Heal(t)
		}
		st2 := e.WaitStatus(time.Minute, "quorum back once healed", harness.Healthy)
		if after := memberIDs(st2); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("member IDs changed: %v, were %v", after, before)
		}
		noAction(t, 2*grace)
		noHostActs(t)
	})
	if t.Failed() {
		return
	}

	t.Run("two hosts lose their data: recovered without a command", func(t *testing.T) {
		e := hs.Env.For(t)
		before := recoveryCounts(t, hs)
		w := harness.StartRevisionWatch(t, hs.Client(), "autorec/")
		// The watch starts at the revision current when it is set up: a
		// key written before that is not delivered; written again, it is.
		harness.Eventually(t, time.Minute, 100*time.Millisecond, "the watch to deliver a write", func() error {
			if w.Seen("autorec/before-loss") {
				return nil
			}
			if _, err := cli.Put(t.Context(), "autorec/before-loss", "v"); err != nil {
				return err
			}
			return errors.New("not delivered yet")
		})
		want := workload.TakeDigest(t, cli, "", 0)
		harness.WaitBackedUp(t, e, want.Rev)
		st := e.Status()
		lost := time.Now()
		for _, n := range []string{"1", "2"} {
			h := hs.Host("h" + n)
			m, _ := st.Member("etcd-" + n)
			if err := os.RemoveAll(filepath.Join(h.Dir, "members", m.Name, "data")); err != nil {
				t.Fatal(err)
			}
			// The agent restarts it and refuses: its data is lost.
			if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		var ar *status.AutoRecoveryState
		harness.Eventually(t, 5*time.Minute, time.Second, "an automatic recovery that succeeded", func() error {
			var err error
			if ar, err = status.ReadAutoRecovery(hs.Dir); err != nil {
				return err
			}
			if ar == nil || ar.LastAction == nil || ar.LastAction.Result != "success" {
				return fmt.Errorf("state %+v", ar)
			}
			return nil
		})
		a := ar.LastAction
		t.Logf("recovered by %s in %s: %s (%s); counts %v", a.Action, time.Since(lost).Round(time.Second), a.Message, a.Reason, ar.Actions)
		checkRecovered(t, before, ar, "2 of 3 members reported not running by their own agents", "reseed", "restore")
		st = e.WaitStatus(2*time.Minute, "three voters on the same hosts", func(st *status.Status) bool {
			return harness.Healthy(st) && st.Cluster.VotingMembers == 3
		})
		if c := harness.Cond(st, status.CondReady); !strings.Contains(c.Message, "last automatic recovery: "+a.Action+", success") {
			t.Errorf("Ready does not show the recovery: %+v", c)
		}
		if st.AutoRecovery == nil || st.AutoRecovery.LastAction == nil {
			t.Errorf("status autoRecovery: %+v", st.AutoRecovery)
		}
		after := hs.Client()
		workload.RequireEqual(t, "keyspace after two hosts lost their data", workload.TakeDigest(t, after, "", 0), want)
		resp, err := after.Put(t.Context(), "autorec/after-reseed", "v")
		if err != nil {
			t.Fatal(err)
		}
		w.WaitSeen(t, "autorec/after-reseed")
		w.WaitRead(t, resp.Header.Revision)
		w.Check(t, "after two hosts' data was recovered")
		noHostActs(t)
		// Every host's agent exports the actions, once each, with their
		// reasons, under the coordinator's recorder.
		if ar.Recorder == "" {
			t.Fatalf("the coordinator's state has no recorder: %+v", ar)
		}
		wantCounted(t, hs, nil, ar.Recorder, countedSeries(ar))
	})
	if t.Failed() {
		return
	}

	t.Run("every data dir lost: restored from the backups without a command", func(t *testing.T) {
		e := hs.Env.For(t)
		cli := hs.Client()
		w := harness.StartRevisionWatch(t, cli, "autorec/")
		for i := range 20 {
			if _, err := cli.Put(t.Context(), fmt.Sprintf("autorec/all-%02d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
		w.WaitSeen(t, "autorec/all-19")
		// Every write below is acknowledged before the newest backup
		// holds it: the recovery restores that backup, so the keyspace
		// comes back exactly. (A write acknowledged after the newest
		// backup would be lost: with no member's data left, the backups
		// are all there is; the continuous backup bounds that loss by
		// backup.deltaMaxAgeMs.)
		want := workload.TakeDigest(t, cli, "", 0)
		harness.WaitBackedUp(t, e, want.Rev)
		before := recoveryCounts(t, hs)
		// h1's agent cannot take the counts when this recovery is
		// counted (a directory where it keeps them: each push fails, as
		// to a host cut off); it gets them once it can.
		h1Counts := filepath.Join(hs.Host("h1").Dir, "status", "recovery-counts.json")
		if err := os.Rename(h1Counts, h1Counts+".aside"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(h1Counts, 0o700); err != nil {
			t.Fatal(err)
		}
		st := e.Status()
		lost := time.Now()
		for _, m := range st.Members {
			h := hs.Host(m.Agent)
			if err := os.RemoveAll(filepath.Join(h.Dir, "members", m.Name, "data")); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		var ar *status.AutoRecoveryState
		harness.Eventually(t, 5*time.Minute, time.Second, "an automatic recovery, started after the loss, that succeeded", func() error {
			var err error
			if ar, err = status.ReadAutoRecovery(hs.Dir); err != nil {
				return err
			}
			if ar == nil || ar.LastAction == nil || ar.LastAction.Started.Before(lost) || ar.LastAction.Result != "success" {
				return fmt.Errorf("state %+v", ar)
			}
			return nil
		})
		a := ar.LastAction
		t.Logf("recovered by %s in %s: %s (%s); counts %v", a.Action, time.Since(lost).Round(time.Second), a.Message, a.Reason, ar.Actions)
		// Counted in the same file (what steward_recovery_actions_total
		// exports): one restore that succeeded (or a failed one resumed).
		checkRecovered(t, before, ar, "3 of 3 members reported not running by their own agents", "restore")
		st = e.WaitStatus(2*time.Minute, "three voters on the same hosts", func(st *status.Status) bool {
			return harness.Healthy(st) && st.Cluster.VotingMembers == 3
		})
		if c := harness.Cond(st, status.CondReady); !strings.Contains(c.Message, "last automatic recovery: "+a.Action+", success") ||
			!strings.Contains(c.Message, a.Reason) {
			t.Errorf("Ready does not show the recovery and its reason: %+v", c)
		}
		if st.AutoRecovery == nil || st.AutoRecovery.LastAction == nil || st.AutoRecovery.LastAction.Action != a.Action {
			t.Errorf("status autoRecovery: %+v", st.AutoRecovery)
		}
		workload.RequireEqual(t, "keyspace after every data dir was lost", workload.TakeDigest(t, hs.Client(), "", 0), want)
		// A write after the recovery is above every revision served
		// before it, and the watch sees it without going backwards.
		resp, err := hs.Client().Put(t.Context(), "autorec/after-restore", "v")
		if err != nil {
			t.Fatal(err)
		}
		if resp.Header.Revision <= want.Rev {
			t.Errorf("a write after the restore got revision %d, not above %d, served before the loss", resp.Header.Revision, want.Rev)
		}
		w.WaitSeen(t, "autorec/after-restore")
		w.WaitRead(t, resp.Header.Revision)
		w.Check(t, "after the restore from the backups")
		noHostActs(t)
		both := countedSeries(ar)
		wantCounted(t, hs, []string{"h2", "h3"}, ar.Recorder, both)
		if got, err := scrapeRecoveryCounts(t, metricsClient(t, hs), "https://"+metricsAddr(t, hs, "h1")+"/metrics"); err != nil || len(got) != 0 {
			t.Errorf("h1, which could not take the counts: %v %v, want no series (never 0)", got, err)
		}
		if err := os.Remove(h1Counts); err != nil {
			t.Fatal(err)
		}
		wantCounted(t, hs, nil, ar.Recorder, both)
	})
	if t.Failed() {
		return
	}

	t.Run("coordinator killed mid-recovery: the one that takes over resumes it", func(t *testing.T) {
		e := hs.Env.For(t)
		st := e.Status()
		want := workload.TakeDigest(t, hs.Client(), "", 0)
		harness.WaitBackedUp(t, e, want.Rev)
		for _, n := range []string{"1", "2"} {
			h := hs.Host("h" + n)
			m, _ := st.Member("etcd-" + n)
			if err := os.RemoveAll(filepath.Join(h.Dir, "members", m.Name, "data")); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Kill(m.PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		// Once the seed runs alone and its fresh snapshot is recorded
		// (the journal, copied to the store, says so), the coordinator's
		// process dies mid-recovery: its machine is lost.
		journal := filepath.Join(hs.Dir, "status", "recovery.json")
		harness.Eventually(t, 3*time.Minute, 20*time.Millisecond, "the recovery past its seed's fresh snapshot", func() error {
			b, err := os.ReadFile(journal)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), `"freshBackup"`) {
				return fmt.Errorf("journal %s", b)
			}
			return nil
		})
		pidb, err := os.ReadFile(filepath.Join(hs.Dir, "run", "certrenew.pid"))
		if err != nil {
			t.Fatal(err)
		}
		var pid int
		if _, err := fmt.Sscan(string(pidb), &pid); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(journal); err != nil {
			t.Fatalf("the recovery finished before its coordinator was killed: %v", err)
		}
		t.Logf("coordinator's process %d killed mid-recovery", pid)

		pkiCopy := t.TempDir()
		for _, f := range []string{"ca.crt", "client.crt", "client.key", "backup-auth.key"} {
			b, err := os.ReadFile(filepath.Join(hs.Dir, "pki", f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pkiCopy, f), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		next := harness.New(t)
		out := next.MustRun("takeover", "--pki", pkiCopy, "--binary-store", next.Store,
			"--backup-s3-endpoint", s3.Endpoint, "--backup-s3-bucket", s3.Bucket,
			"--backup-s3-credentials-file", s3.CredentialsFile, "--backup-s3-prefix", "autorec")
		if !strings.Contains(out, "generation 2") || !strings.Contains(out, "a recovery is unfinished") {
			t.Fatalf("takeover: %s", out)
		}
		rep, out := harness.RecoverJSON(t, next)
		if rep.Action != "resume" || rep.Seed != "etcd-3" {
			t.Fatalf("recover on the new coordinator: want the recovery resumed from etcd-3: %s", out)
		}
		next.WaitStatus(2*time.Minute, "three voters on the same hosts", func(st *status.Status) bool {
			return harness.Healthy(st) && st.Cluster.VotingMembers == 3
		})
		if _, err := os.Stat(filepath.Join(next.Dir, "status", "recovery.json")); err == nil {
			t.Errorf("the new coordinator's journal is left after the recovery finished")
		}
		workload.RequireEqual(t, "keyspace after the recovery resumed by the new coordinator", workload.TakeDigest(t, next.Client(), "", 0), want)
		noHostActs(t)
	})
}

// recoveryCounts is the automatic recoveries the coordinator counted so
// far (harness.RecoveryCounts).
func recoveryCounts(t *testing.T, hs *harness.Hosts) map[string]int64 {
	t.Helper()
	st, err := status.ReadAutoRecovery(hs.Dir)
	if err != nil {
		t.Fatal(err)
	}
	return harness.RecoveryCounts(st)
}

// checkRecovered: the coordinator's recoveries since before are a
// correct way through one quorum loss (harness.CheckRecoveryPath: one
// success, of actions or a resume after a failure; a failed restore under
// load, resumed, is one), ar's last action is that success, and its reason
// is the loss's (lost, in words) or, for a resume, the unfinished
// recovery's.
func checkRecovered(t *testing.T, before map[string]int64, ar *status.AutoRecoveryState, lost string, actions ...string) {
	t.Helper()
	if err := harness.CheckRecoveryPath(before, harness.RecoveryCounts(ar), ar.LastAction, actions...); err != nil {
		t.Errorf("recoveries counted %v (before: %v): %v", ar.Actions, before, err)
		return
	}
	a := ar.LastAction
	if a.Action == "resume" {
		if !strings.HasPrefix(a.Reason, "an unfinished recovery is recorded") {
			t.Errorf("last action %+v: a resume, for another reason", a)
		}
		return
	}
	if !strings.Contains(a.Reason, lost) {
		t.Errorf("last action %+v; want it taken because %s", a, lost)
	}
}

// countedSeries is the steward_recovery_actions_total series every
// host's agent exports for the coordinator's state ar: its counts, by
// action/reason/result.
func countedSeries(ar *status.AutoRecoveryState) map[string]float64 {
	out := map[string]float64{}
	for k, n := range harness.RecoveryCounts(ar) {
		out[k] = float64(n)
	}
	return out
}

// recoverySeries is one steward_recovery_actions_total line: its labels
// and value.
var recoverySeries = regexp.MustCompile(`(?m)^steward_recovery_actions_total\{([^}]*)\} (\S+)$`)

// scrapeRecoveryCounts reads steward_recovery_actions_total from an
// agent's /metrics (HTTPS, the cluster CA): the values by
// recorder/action/reason/result.
func scrapeRecoveryCounts(t *testing.T, hc *http.Client, url string) (map[string]float64, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	label := regexp.MustCompile(`(\w+)="([^"]*)"`)
	for _, m := range recoverySeries.FindAllStringSubmatch(string(b), -1) {
		l := map[string]string{}
		for _, kv := range label.FindAllStringSubmatch(m[1], -1) {
			l[kv[1]] = kv[2]
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return nil, err
		}
		out[l["recorder"]+"/"+l["action"]+"/"+l["reason"]+"/"+l["result"]] = v
	}
	return out, nil
}

// metricsClient is an HTTPS client that trusts the cluster CA (the
// hosts' agents serve metrics with their certificates).
func metricsClient(t *testing.T, hs *harness.Hosts) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(filepath.Join(hs.Dir, "pki", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	return hc
}

// metricsAddr is the metricsAddress of agent in the spec.
func metricsAddr(t *testing.T, hs *harness.Hosts, agent string) string {
	t.Helper()
	a, ok := hs.Spec().Agent(agent)
	if !ok || a.MetricsAddress == "" {
		t.Fatalf("agent %s has no metricsAddress", agent)
	}
	return a.MetricsAddress
}

// wantCounted polls the /metrics of each agent of agents (nil: every
// host's) until its steward_recovery_actions_total of recorder is want
// (by action/reason/result; every other series 0, and no other
// recorder): each host exports the coordinator's counts, each action
// once.
func wantCounted(t *testing.T, hs *harness.Hosts, agents []string, recorder string, want map[string]float64) {
	t.Helper()
	hc := metricsClient(t, hs)
	if agents == nil {
		for _, a := range hs.Spec().Agents {
			agents = append(agents, a.Name)
		}
	}
	for _, name := range agents {
		url := "https://" + metricsAddr(t, hs, name) + "/metrics"
		harness.Eventually(t, time.Minute, 500*time.Millisecond, "host "+name+" exports the recovery counts", func() error {
			got, err := scrapeRecoveryCounts(t, hc, url)
			if err != nil {
				return err
			}
			if len(got) == 0 {
				return fmt.Errorf("no steward_recovery_actions_total at %s", url)
			}
			for k, v := range got {
				parts := strings.SplitN(k, "/", 2)
				if parts[0] != recorder {
					return fmt.Errorf("series of recorder %s (want only %s): %v", parts[0], recorder, got)
				}
				if v != want[parts[1]] {
					return fmt.Errorf("%s = %v, want %v (all: %v)", k, v, want[parts[1]], got)
				}
			}
			for k := range want {
				if _, ok := got[recorder+"/"+k]; !ok {
					return fmt.Errorf("no series %s/%s: %v", recorder, k, got)
				}
			}
			return nil
		})
	}
}
