package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/test/harness"
)

// learnerErr is what etcd answers a learner's clients for every request
// but Status and serializable reads.
const learnerErr = "rpc not supported for learner"

// userLoad is what a user's plain clientv3 client does: puts and
// linearizable gets (gets only without writes), spread by clientv3's round
// robin over every endpoint it was given. It counts every error by
// message.
type userLoad struct {
	stop chan struct{}  // closed by Stop
	wg   sync.WaitGroup // the workers

	mu   sync.Mutex
	ok   int            // guarded by mu; requests that succeeded
	errs map[string]int // guarded by mu; failed requests by error message
}

func startUserLoad(t *testing.T, cli *clientv3.Client, workers int, writes bool) *userLoad {
	l := &userLoad{stop: make(chan struct{}), errs: map[string]int{}}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-t.Context().Done():
					return
				default:
				}
				key := fmt.Sprintf("user/%d", w)
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				var err error
				if writes && i%2 == 0 {
					_, err = cli.Put(ctx, key, fmt.Sprint(i))
				} else {
					_, err = cli.Get(ctx, key) // linearizable: the default
				}
				cancel()
				l.mu.Lock()
				if err != nil {
					l.errs[err.Error()]++
				} else {
					l.ok++
				}
				l.mu.Unlock()
				if err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	t.Cleanup(l.Stop)
	return l
}

// Stop ends the load and waits for its workers (idempotent; called from
// the test's goroutine only).
func (l *userLoad) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// result returns the requests that succeeded and the failed ones by error.
func (l *userLoad) result() (int, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := map[string]int{}
	for k, v := range l.errs {
		errs[k] = v
	}
	return l.ok, errs
}

// userClient is a plain clientv3 client over endpoints, as a user makes one.
func userClient(t *testing.T, e *harness.Env, endpoints []string) *clientv3.Client {
	t.Helper()
	s := e.Spec()
	cfg := clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}
	if !s.TLS.Disabled {
		tc, err := pki.ClientTLS(s.CertDir(e.Dir))
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

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
	cport, err := spec.FreePort("127.0.0.1")()
	if err != nil {
		t.Fatal(err)
	}
	newURL := fmt.Sprintf("%s://127.0.0.1:%d", s.Scheme(), cport)
	eps := s.ClientURLs()
	// The user's client already knows the URL the new member gets; a
	// fresh client per request on each URL (as a user running etcdctl
	// does) connects at once, without a long-lived client's reconnect
	// back-off.
	eps = append(eps, newURL)
	load, fresh := startLearnerWatch(t, e, eps, true)
	started := time.Now()
	e.MustRun("member", "add", "m4", "--client-url", newURL)
	afterAdd, _ := load.result()
	harness.Eventually(t, 30*time.Second, 100*time.Millisecond, "the user's requests to succeed after the add", func() error {
		if ok, _ := load.result(); ok < afterAdd+100 {
			return fmt.Errorf("%d requests succeeded since the add", ok-afterAdd)
		}
		return nil
	})
	replaced := s.Members[1].Name
	e.MustRun("member", "replace", replaced)
	e.WaitStatus(60*time.Second, "4 healthy voting members", func(st *cluster.Status) bool {
		return harness.Healthy(st) && st.Cluster.VotingMembers == 4 && st.Cluster.Learners == 0
	})
	load.Stop()
	fresh.Stop()
	t.Logf("add and replace took %s", time.Since(started).Round(time.Millisecond))
	requireNoLearnerErrors(t, "member add and replace", load, fresh)
}

// startLearnerWatch starts what TestLearnerNeverOnClientURL runs against a
// cluster: a user's long-lived client over endpoints (8 workers; puts
// under user/ when writes) and a fresh client per request on each of them
// (gets). Stop both before requireNoLearnerErrors reads them.
func startLearnerWatch(t *testing.T, e *harness.Env, endpoints []string, writes bool) (long, fresh *userLoad) {
	return startUserLoad(t, userClient(t, e, endpoints), 8, writes), startFreshProbes(t, e, endpoints)
}

// requireNoLearnerErrors fails t when a request of the long-lived client
// or of the fresh ones met "rpc not supported for learner" during what,
// or when none of them succeeded (a load that never reached a member
// proves nothing).
func requireNoLearnerErrors(t *testing.T, what string, long, fresh *userLoad) {
	t.Helper()
	for _, l := range []struct {
		what string
		l    *userLoad
	}{{"a long-lived client over every URL", long}, {"a fresh client per request on each URL", fresh}} {
		ok, errs := l.l.result()
		t.Logf("%s: %d requests succeeded; errors: %v", l.what, ok, errs)
		learner := 0
		for msg, n := range errs {
			if strings.Contains(msg, learnerErr) {
				learner += n
			}
		}
		if learner > 0 {
			t.Errorf("%s: %d requests failed with %q during %s", l.what, learner, learnerErr, what)
		}
		if ok == 0 {
			t.Errorf("%s: no request succeeded during %s", l.what, what)
		}
	}
}

// startFreshProbes makes, every 20 ms and for each endpoint, a new client
// of that endpoint alone and a linearizable get through it.
func startFreshProbes(t *testing.T, e *harness.Env, endpoints []string) *userLoad {
	s := e.Spec()
	l := &userLoad{stop: make(chan struct{}), errs: map[string]int{}}
	for _, ep := range endpoints {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-l.stop:
					return
				case <-t.Context().Done():
					return
				case <-tick.C:
				}
				cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: time.Second, Logger: zap.NewNop()}
				if !s.TLS.Disabled {
					tc, err := pki.ClientTLS(s.CertDir(e.Dir))
					if err != nil {
						panic(err)
					}
					cfg.TLS = tc
				}
				cli, err := clientv3.New(cfg)
				if err == nil {
					ctx, cancel := context.WithTimeout(t.Context(), time.Second)
					_, err = cli.Get(ctx, "user/probe")
					cancel()
					cli.Close()
				}
				l.mu.Lock()
				if err != nil {
					l.errs[err.Error()]++
				} else {
					l.ok++
				}
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.Stop)
	return l
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
	ports := harness.FreePorts(t, 2)
	cp, pp := ports[0], ports[1]
	scheme := c.Spec.Scheme()
	joiner := spec.Member{
		Name: "etcd-2", Agent: first.Agent, DataDir: "members/etcd-2/data",
		ClientURL: fmt.Sprintf("%s://127.0.0.1:%d", scheme, cp),
		PeerURL:   fmt.Sprintf("%s://127.0.0.1:%d", scheme, pp),
		Bootstrap: &spec.Bootstrap{InitialCluster: first.Name + "=" + first.PeerURL + ",etcd-2=" + fmt.Sprintf("%s://127.0.0.1:%d", scheme, pp)},
	}
	cli := e.Client()
	if _, err := cli.MemberAddAsLearner(ctx, []string{joiner.PeerURL}); err != nil {
		t.Fatal(err)
	}
	next := c.Spec.Clone()
	next.Members = append(next.Members, joiner)
	if err := c.SaveSpec(next); err != nil {
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
	e.WaitStatus(time.Minute, "no member reporting the downgrade", func(st *cluster.Status) bool {
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
