package membership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/internal/portcheck"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// ErrQuorumAtRisk refuses a remove or stop that would leave the cluster
// without a healthy quorum (their Force options override it).
var ErrQuorumAtRisk = errors.New("the cluster would lose its healthy quorum")

// ErrDowngradeInProgress refuses an add or replace while etcd's downgrade
// is enabled: etcd lets no member join then (requireNoDowngrade).
var ErrDowngradeInProgress = errors.New("etcd's downgrade is in progress")

// ErrDowngradeOfPlan is the ErrDowngradeInProgress (of the same text) of
// a downgrade a plan enabled and has not ended: finishing that plan ends
// it, and the refusal's message ends naming the plan, for the command to
// say how.
var ErrDowngradeOfPlan = fmt.Errorf("%w", ErrDowngradeInProgress)

func agentNames(s *spec.Cluster) []string {
	var out []string
	for _, a := range s.Agents {
		out = append(out, a.Name)
	}
	return out
}

// ErrLastMember refuses to remove the last member of a cluster, even with
// Force: deleting the whole cluster is another command's work.
var ErrLastMember = errors.New("cannot remove the last member")

// AddOptions configure Add.
type AddOptions struct {
	// Agent runs the new member: the host's name in a multi-host
	// cluster (default: local, the agent on this machine).
	Agent string
	// ClientURL and PeerURL default to free ports on the local members'
	// address (spec.Cluster.LocalAddress, 127.0.0.1 by default) for the
	// local agent, and to the next unused pair from 2379/2380 (10 apart)
	// on another host's address.
	ClientURL, PeerURL string
	// Timeout bounds the wait for the learner to catch up (default 10m).
	Timeout time.Duration
}

// Add adds a member as a learner, starts it, waits until it has
// caught up with the leader, and promotes it to a voting member. If any
// step fails the member is removed again and the spec is left as it was.
func Add(ctx context.Context, c *cluster.Cluster, name string, o AddOptions) (err error) {
	if _, ok := c.Spec.Member(name); ok {
		return fmt.Errorf("member %q already exists in %s", name, c.SpecPath())
	}
	if o.Agent == "" {
		if _, ok := c.Spec.Agent(spec.LocalAgent); !ok && c.Spec.MultiHost() {
			return fmt.Errorf("member %s: name the host it runs on (hosts: %v)", name, agentNames(c.Spec))
		}
		o.Agent = spec.LocalAgent
	}
	agent, ok := c.Spec.Agent(o.Agent)
	if !ok {
		return fmt.Errorf("member %s: host %q is not in %s (hosts: %v); add it first", name, o.Agent, c.SpecPath(), agentNames(c.Spec))
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if agent.Remote() && (o.ClientURL == "" || o.PeerURL == "") {
		// The next free pair of the 10-apart series on that host.
		cp, pp := c.Spec.NextPorts(agent.Name, 2379, 2380)
		if o.ClientURL == "" {
			o.ClientURL = fmt.Sprintf("%s://%s", c.Spec.Scheme(), net.JoinHostPort(agent.Host, strconv.Itoa(cp)))
		}
		if o.PeerURL == "" {
			o.PeerURL = fmt.Sprintf("%s://%s", c.Spec.Scheme(), net.JoinHostPort(agent.Host, strconv.Itoa(pp)))
		}
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return err
	}
	if err := requireAllHealthy(st, "add a member"); err != nil {
		return err
	}
	latest, err := latestPlan(c)
	if err != nil {
		return err
	}
	if err := requireNoDowngrade(st, latest, "add a member"); err != nil {
		return err
	}
	// A local member listens where the local members do (a spec written
	// by `up --address` keeps its clusters off each other's ports).
	host := c.Spec.LocalAddress()
	free := spec.FreePort(host)
	if o.ClientURL == "" {
		p, err := free()
		if err != nil {
			return err
		}
		o.ClientURL = fmt.Sprintf("%s://%s", c.Spec.Scheme(), net.JoinHostPort(host, strconv.Itoa(p)))
	}
	if o.PeerURL == "" {
		for {
			p, err := free()
			if err != nil {
				return err
			}
			if u := fmt.Sprintf("%s://%s", c.Spec.Scheme(), net.JoinHostPort(host, strconv.Itoa(p))); u != o.ClientURL {
				o.PeerURL = u
				break
			}
		}
	}
	old := c.Spec.Clone()
	next := c.Spec.Clone()
	next.Members = append(next.Members, spec.Member{
		Name: name, Agent: o.Agent, ClientURL: o.ClientURL, PeerURL: o.PeerURL,
		DataDir: "members/" + name + "/data",
	})
	if _, err := c.ValidateChange(next); err != nil {
		return err
	}
	// On this machine, check the data dir and ports before anything
	// changes; an agent on another host checks both before it starts the
	// member (and a failed start removes the learner again).
	nm, _ := next.Member(name)
	dataDir := ""
	if !agent.Remote() {
		dataDir = spec.Path(c.Dir, nm.DataDir)
		if err := datadir.RequireEmpty(dataDir); err != nil {
			return fmt.Errorf("member %s: %w", name, err)
		}
		for _, u := range []string{o.ClientURL, o.PeerURL} {
			hp, _ := spec.HostPort(u)
			if err := portcheck.Free(hp); err != nil {
				return fmt.Errorf("member %s: %s: %w", name, u, err)
			}
		}
	}
	ac, err := c.Runtime(o.Agent)
	if err != nil {
		return err
	}
	if err := ac.Ping(ctx, 2*time.Second); err != nil {
		return fmt.Errorf("agent %s does not answer: %w", o.Agent, err)
	}
	c.Spec = next
	if err := c.EnsureCerts(); err != nil {
		c.Spec = old
		return err
	}
	c.Spec = old

	cli, err := c.Client()
	if err != nil {
		return err
	}
	defer cli.Close()
	c.Progress.Say("adding %s as a learner (peer %s)", name, o.PeerURL)
	resp, err := addLearner(ctx, cli, o.PeerURL)
	if err != nil {
		return fmt.Errorf("add member %s as learner: %w", name, err)
	}
	id := resp.Member.ID
	// From here on, undo on failure so nothing is left half-done.
	defer func() {
		if err == nil {
			return
		}
		c.Progress.Say("add failed; removing learner %s again", name)
		// The undo runs even when ctx ended the add (Ctrl-C): a learner
		// left behind blocks the next add, so it has 30 s of its own.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		var undo []string
		if dataDir == "" {
			// On another host: its agent stops it and moves its data aside.
			if aside, derr := ac.DeleteMemberAside(uctx, name, "failed-add"); derr != nil {
				undo = append(undo, "stop member and move its data aside: "+derr.Error())
			} else if aside != "" {
				c.Progress.Say("moved partial data dir on host %s to %s", o.Agent, aside)
			}
		} else if derr := ac.DeleteMember(uctx, name); derr != nil {
			undo = append(undo, "stop member: "+derr.Error())
		}
		if _, rerr := cli.MemberRemove(uctx, id); rerr != nil && !errors.Is(rerr, rpctypes.ErrMemberNotFound) {
			undo = append(undo, fmt.Sprintf("remove member %x: %v", id, rerr))
		}
		if dataDir != "" { // on another host, its agent moved it aside above
			if aside, merr := datadir.MoveAside(dataDir, "failed-add"); merr != nil {
				undo = append(undo, "move data aside: "+merr.Error())
			} else if aside != "" {
				c.Progress.Say("moved partial data dir to %s", aside)
			}
		}
		if serr := c.SaveSpec(uctx, old); serr != nil {
			undo = append(undo, "restore spec: "+serr.Error())
		}
		if len(undo) > 0 {
			err = fmt.Errorf("%w; undo incomplete: %s", err, strings.Join(undo, "; "))
		}
	}()
	next.Members[len(next.Members)-1].Bootstrap = &spec.Bootstrap{InitialCluster: initialClusterFrom(resp.Members, id, name)}
	if err := c.SaveSpec(ctx, next); err != nil {
		return err
	}
	nm, _ = c.Spec.Member(name)
	private := privateLearner(resp.Members, o.PeerURL)
	learnerURL, err := startLearner(ctx, c, ac, *nm, private)
	if err != nil {
		return fmt.Errorf("start member %s on agent %s: %w", name, o.Agent, err)
	}
	c.Progress.Say("started %s; waiting for it to catch up with the leader", name)
	if err := promoteWhenReady(ctx, c, cli, name, learnerURL, id, o.Timeout); err != nil {
		return err
	}
	if private {
		if err := serveClients(ctx, c, ac, *nm); err != nil {
			return err
		}
	}
	return status.WaitMemberHealthy(ctx, c, name, time.Minute)
}

// privateLearner tells whether the learner of peerURL among members starts
// on a private client URL: whether, once it is promoted, the other voters
// keep quorum while it restarts on its real one. They do from two voters
// on (2 of 3); beside a single voter (a one-member cluster growing; a
// two-member cluster's recovery, see RejoinPrivate) a restart of the new
// voter would stop the cluster, so that learner starts on its real client
// URL.
func privateLearner(members []*pb.Member, peerURL string) bool {
	others := 0
	for _, m := range members {
		if !m.IsLearner && !slices.Contains(m.PeerURLs, peerURL) {
			others++
		}
	}
	total := others + 1
	return others >= total/2+1
}

// startLearner configures spec member m on its agent and starts it. With
// private, its client listener is on a private port (and that URL is the
// one it advertises), so that no client reaches it while it is a learner,
// which answers all but serializable reads with "rpc not supported for
// learner"; serveClients moves it to its real client URL once it votes. It
// returns the client URL the learner listens on.
func startLearner(ctx context.Context, c *cluster.Cluster, ac memberrt.Runtime, m spec.Member, private bool) (string, error) {
	cfg := c.MemberConfig(m)
	if _, err := ac.PutMember(ctx, cfg); err != nil {
		return "", fmt.Errorf("configure member %s: %w", m.Name, err)
	}
	if private {
		u, err := c.PrivateClientURL(ctx, m)
		if err != nil {
			return "", err
		}
		cfg.ClientURL, cfg.PrivateClientURL = u, true
		if _, err := ac.PutMember(ctx, cfg); err != nil {
			return "", fmt.Errorf("configure member %s on a private client port: %w", m.Name, err)
		}
		c.Progress.Say("%s starts as a learner on a private client URL (%s); clients reach it on %s once it votes", m.Name, u, m.ClientURL)
	}
	if _, err := ac.Start(ctx, m.Name); err != nil {
		return "", err
	}
	return cfg.ClientURL, nil
}

// serveClients restarts a promoted member on its real client URL: its
// agent stops it (no client knows its private URL, so nothing waits on
// it), takes its real config and starts it again. The other voters keep
// quorum meanwhile (startLearner's caller makes sure of it).
func serveClients(ctx context.Context, c *cluster.Cluster, ac memberrt.Runtime, m spec.Member) error {
	if _, err := ac.Stop(ctx, m.Name); err != nil {
		return fmt.Errorf("stop member %s on its private client URL: %w", m.Name, err)
	}
	if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
		return fmt.Errorf("configure member %s on its client URL: %w", m.Name, err)
	}
	if _, err := ac.Start(ctx, m.Name); err != nil {
		return fmt.Errorf("start member %s on its client URL: %w", m.Name, err)
	}
	c.Progress.Say("%s votes; restarted it on its client URL %s", m.Name, m.ClientURL)
	return nil
}

// promoteWhenReady promotes a learner as soon as etcd accepts it (the
// learner's log must be close to the leader's), reporting progress.
func promoteWhenReady(ctx context.Context, c *cluster.Cluster, cli *clientv3.Client, name, learnerURL string, id uint64, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	lastReport := time.Time{}
	err := cluster.Poll(ctx, 300*time.Millisecond, func(ctx context.Context) (bool, error) {
		// A member that cannot start will not catch up: fail fast.
		m, _ := c.Spec.Member(name)
		if ac, err := c.RuntimeFor(*m); err == nil {
			if as, err := ac.Member(ctx, name); err == nil && (as.State == "Failed" || as.State == "CrashLoopBackOff") {
				return false, fmt.Errorf("member %s is %s: %s %s", name, as.State, as.LastError, as.LastExit)
			}
		}
		pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cli.MemberPromote(pctx, id)
		pcancel()
		if err == nil {
			c.Progress.Say("promoted %s to a voting member", name)
			return true, nil
		}
		if errors.Is(err, rpctypes.ErrMemberLearnerNotReady) || errors.Is(err, context.DeadlineExceeded) ||
			strings.Contains(err.Error(), "not in sync") || strings.Contains(err.Error(), "not started") {
			if time.Since(lastReport) > 5*time.Second {
				lastReport = time.Now()
				msg, err := catchUpProgress(ctx, c, name, id, learnerURL)
				if err != nil {
					return false, err
				}
				c.Progress.Say("  %s", msg)
			}
			return false, nil
		}
		if errors.Is(err, rpctypes.ErrMemberNotLearner) {
			return true, nil
		}
		return false, fmt.Errorf("promote %s: %w", name, err)
	})
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		msg, werr := catchUpProgress(context.Background(), c, name, id, learnerURL)
		if werr != nil {
			return fmt.Errorf("learner %s did not catch up with the leader within %s: %w", name, timeout, werr)
		}
		return fmt.Errorf("learner %s did not catch up with the leader within %s: %s", name, timeout, msg)
	}
	return err
}

// catchUpProgress says how far learner name (member ID id, on learnerURL)
// is behind the leader. It fails with status.ErrWrongMember when another
// member answers on the learner's URL: its index is not the learner's.
func catchUpProgress(ctx context.Context, c *cluster.Cluster, name string, id uint64, learnerURL string) (string, error) {
	if _, ok := c.Spec.Member(name); !ok {
		return "", nil
	}
	cli, err := clientExcluding(c, name)
	if err != nil {
		return err.Error(), nil
	}
	defer cli.Close()
	ls, err := status.Endpoint(ctx, c, name, id, learnerURL)
	if errors.Is(err, status.ErrWrongMember) {
		return "", err
	}
	if err != nil {
		return fmt.Sprintf("learner %s not answering yet (%s)", name, cluster.ShortErr(err)), nil
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, o := range c.Spec.Members {
		if o.Name == name {
			continue
		}
		if s, err := cli.Status(sctx, o.ClientURL); err == nil && s.Leader == s.Header.MemberId {
			return fmt.Sprintf("learner %s applied index %d of leader's %d", name, ls.RaftAppliedIndex, s.RaftAppliedIndex), nil
		}
	}
	return fmt.Sprintf("learner %s applied index %d", name, ls.RaftAppliedIndex), nil
}

// initialClusterFrom builds --initial-cluster from etcd's member list after
// MemberAdd; the new member has no name yet, so it gets newName.
func initialClusterFrom(members []*pb.Member, newID uint64, newName string) string {
	var parts []string
	for _, m := range members {
		n := m.Name
		if m.ID == newID {
			n = newName
		}
		if n == "" {
			continue // another member added but never started: etcd ignores it
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ",")
}

// RemoveOptions configure Remove.
type RemoveOptions struct {
	// Force removes the member even when the rest would not be quorate.
	Force bool
}

// Remove removes a member from the cluster, stops it, and moves its
// data dir aside. It refuses to remove the last member, and (unless Force)
// to leave the cluster without a healthy quorum. A leader hands its
// leadership to a healthy follower first.
func Remove(ctx context.Context, c *cluster.Cluster, name string, o RemoveOptions) error {
	m, err := c.Member(name)
	if err != nil {
		return err
	}
	if len(c.Spec.Members) == 1 {
		return refusal.New(ErrLastMember, "refusing to remove %s: it is the last member of the cluster", name)
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return err
	}
	target, _ := st.Member(name)
	voters, healthyOthers := voterCounts(st, name)
	remaining := voters
	if target.Role != "learner" {
		remaining--
	}
	if need := remaining/2 + 1; healthyOthers < need && !o.Force {
		return refusal.New(ErrQuorumAtRisk, "refusing to remove %s: the %d remaining voting members would need %d healthy for quorum but only %d are healthy (%s); fix them first",
			name, remaining, need, healthyOthers, st.Unhealthy())
	}
	cli, err := clientExcluding(c, name)
	if err != nil {
		return err
	}
	defer cli.Close()
	if target.Role == "leader" {
		to := pickTransferee(st, name)
		if to == "" {
			return fmt.Errorf("refusing to remove leader %s: no healthy follower to hand leadership to", name)
		}
		c.Progress.Say("%s is the leader; moving leadership to %s first", name, to)
		if err := MoveLeader(ctx, c, to); err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
	}
	id, found, err := memberID(ctx, c, cli, m)
	if err != nil {
		return err
	}
	if found {
		err = retryUnhealthy(ctx, func(ctx context.Context) error {
			_, err := cli.MemberRemove(ctx, id)
			return err
		})
		if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			return fmt.Errorf("remove member %s (%x) from etcd: %w", name, id, err)
		}
		c.Progress.Say("removed %s (%x) from the cluster", name, id)
	}
	remoteAside := ""
	if ac, err := c.RuntimeFor(m); err == nil {
		if c.OnOtherHost(m) {
			// Its agent stops it and moves its data dir aside there.
			remoteAside, err = ac.DeleteMemberAside(ctx, name, "removed")
		} else {
			err = ac.DeleteMember(ctx, name)
		}
		if err != nil && !memberrt.IsNotFound(err) {
			return fmt.Errorf("member %s was removed from etcd but its agent could not stop it: %w", name, err)
		}
	}
	next := c.Spec.Clone()
	next.Members = nil
	for _, o := range c.Spec.Members {
		if o.Name != name {
			next.Members = append(next.Members, o)
		}
	}
	if err := c.SaveSpec(ctx, next); err != nil {
		return err
	}
	if c.OnOtherHost(m) {
		if remoteAside != "" {
			c.Progress.Say("moved data dir of %s on host %s to %s", name, m.Agent, remoteAside)
		}
		return nil
	}
	aside, err := datadir.MoveAside(spec.Path(c.Dir, m.DataDir), "removed")
	if err != nil {
		return fmt.Errorf("member %s removed, but its data dir could not be moved aside: %w", name, err)
	}
	if aside != "" {
		c.Progress.Say("moved data dir of %s to %s", name, aside)
	}
	return nil
}

// Replace rebuilds a member whose data was lost: it removes the old
// member ID, moves the old data dir aside, re-adds the member as a learner on
// the same URLs, and promotes it once it has caught up. It can be re-run
// after a failure and continues where it stopped.
func Replace(ctx context.Context, c *cluster.Cluster, name string, timeout time.Duration) error {
	m, err := c.Member(name)
	if err != nil {
		return err
	}
	if timeout == 0 {
		timeout = 10 * time.Minute
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return err
	}
	voters, healthyOthers := voterCounts(st, name)
	if t, _ := st.Member(name); len(c.Spec.Members) == 1 || voters < 2 && t.Role != "learner" && (t.ID != "" || t.Healthy) {
		return fmt.Errorf("refusing to replace %s: it is the only voting member; a single-member cluster that lost its data needs a restore from backup", name)
	}
	if need := voters/2 + 1; healthyOthers < need {
		return fmt.Errorf("refusing to replace %s: the other members are not quorate (%d healthy, %d needed): %s",
			name, healthyOthers, need, st.Unhealthy())
	}
	latest, err := latestPlan(c)
	if err != nil {
		return err
	}
	if err := requireNoDowngrade(st, latest, "replace "+name); err != nil {
		return err
	}
	ac, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	cli, err := clientExcluding(c, name)
	if err != nil {
		return err
	}
	defer cli.Close()
	if t, _ := st.Member(name); t.Role == "leader" {
		if to := pickTransferee(st, name); to != "" {
			c.Progress.Say("%s is the leader; moving leadership to %s first", name, to)
			if err := MoveLeader(ctx, c, to); err != nil {
				return err
			}
		}
	}
	c.Progress.Say("stopping %s", name)
	if _, err := ac.Stop(ctx, name); err != nil && !memberrt.IsNotFound(err) {
		return fmt.Errorf("stop member %s: %w", name, err)
	}
	return Rejoin(ctx, c, cli, ac, m, timeout)
}

// Rejoin makes stopped spec member m a new member of the cluster cli talks
// to: it removes m's old etcd entry (by peer URL), moves its data dir aside,
// adds it as a learner, starts it empty, and promotes it once it has caught
// up. Every step can be re-run: an unstarted learner left by an earlier
// attempt is reused. The learner listens on a private client URL and moves
// to its own once it votes, unless restarting it then would stop the
// cluster (privateLearner).
func Rejoin(ctx context.Context, c *cluster.Cluster, cli *clientv3.Client, ac memberrt.Runtime, m spec.Member, timeout time.Duration) error {
	return rejoin(ctx, c, cli, ac, m, timeout, false)
}

// RejoinPrivate is Rejoin for a cluster being rebuilt member by member
// (recovery's reseed beside its seed): the learner always starts on a
// private client URL and, once promoted, stays there, so that the first
// member added beside a single voter serves no client as a learner either.
// Once enough members vote that one can restart without stopping the
// cluster (three), ServeClients moves each to its client URL.
func RejoinPrivate(ctx context.Context, c *cluster.Cluster, cli *clientv3.Client, ac memberrt.Runtime, m spec.Member, timeout time.Duration) error {
	return rejoin(ctx, c, cli, ac, m, timeout, true)
}

// ServeClients moves spec member m, a voting member left on a private
// client URL by RejoinPrivate (or by an add or replace that was
// interrupted after the promotion), to its client URL and waits until it
// is healthy there. It does nothing when its agent already has it on its
// client URL. The other voters must keep quorum while it restarts.
func ServeClients(ctx context.Context, c *cluster.Cluster, m spec.Member) error {
	ac, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	as, err := ac.Member(ctx, m.Name)
	if err != nil {
		return fmt.Errorf("member %s: %w", m.Name, err)
	}
	if as.ClientURL == c.MemberConfig(m).ClientURL {
		return nil
	}
	if err := serveClients(ctx, c, ac, m); err != nil {
		return err
	}
	return status.WaitMemberHealthy(ctx, c, m.Name, time.Minute)
}

// UnfinishedError: a member's rejoin (Replace, Rejoin) stopped after it
// had begun; every step can be re-run, so replacing Member again
// continues it (the command says how: cli.LibraryAdvice).
type UnfinishedError struct {
	Member string
	Err    error
}

func (e *UnfinishedError) Error() string { return e.Err.Error() }
func (e *UnfinishedError) Unwrap() error { return e.Err }

func rejoin(ctx context.Context, c *cluster.Cluster, cli *clientv3.Client, ac memberrt.Runtime, m spec.Member, timeout time.Duration, stayPrivate bool) error {
	name := m.Name
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list members: %w", err)
	}
	var learnerID uint64
	for _, em := range list.Members {
		if !slices.Contains(em.PeerURLs, m.PeerURL) {
			continue
		}
		if em.IsLearner && em.Name == "" {
			learnerID = em.ID // an earlier replace got this far
			continue
		}
		err := retryUnhealthy(ctx, func(ctx context.Context) error {
			_, err := cli.MemberRemove(ctx, em.ID)
			return err
		})
		if err != nil && !errors.Is(err, rpctypes.ErrMemberNotFound) {
			return fmt.Errorf("remove old member %s (%x): %w", name, em.ID, err)
		}
		c.Progress.Say("removed old member ID %x", em.ID)
	}
	if aside, err := c.MoveDataDirAside(ctx, m, "replaced"); err != nil {
		return fmt.Errorf("move data dir of %s aside: %w", name, err)
	} else if aside != "" {
		c.Progress.Say("moved old data dir to %s", aside)
	}
	var initial string
	if learnerID == 0 {
		resp, err := addLearner(ctx, cli, m.PeerURL)
		if err != nil {
			return &UnfinishedError{Member: name, Err: fmt.Errorf("re-add %s as learner: %w", name, err)}
		}
		learnerID = resp.Member.ID
		initial = initialClusterFrom(resp.Members, learnerID, name)
		c.Progress.Say("re-added %s as learner %x", name, learnerID)
	} else {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := cli.MemberList(lctx)
		cancel()
		if err != nil {
			return err
		}
		initial = initialClusterFrom(list.Members, learnerID, name)
	}
	next := c.Spec.Clone()
	nm, _ := next.Member(name)
	nm.Bootstrap = &spec.Bootstrap{InitialCluster: initial}
	if err := c.SaveSpec(ctx, next); err != nil {
		return err
	}
	nm, _ = c.Spec.Member(name)
	// Its clients know its client URL: it listens there only once it
	// votes, unless restarting it then would stop the cluster.
	lctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	list, err = cli.MemberList(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("list members: %w", err)
	}
	private := stayPrivate || privateLearner(list.Members, m.PeerURL)
	learnerURL, err := startLearner(ctx, c, ac, *nm, private)
	if err != nil {
		return &UnfinishedError{Member: name, Err: fmt.Errorf("start member %s: %w", name, err)}
	}
	c.Progress.Say("started %s with an empty data dir; waiting for it to catch up", name)
	if err := promoteWhenReady(ctx, c, cli, name, learnerURL, learnerID, timeout); err != nil {
		return &UnfinishedError{Member: name, Err: err}
	}
	if stayPrivate {
		return nil
	}
	if private {
		if err := serveClients(ctx, c, ac, *nm); err != nil {
			return &UnfinishedError{Member: name, Err: err}
		}
	}
	return status.WaitMemberHealthy(ctx, c, name, time.Minute)
}

// Stop stops a member's process (it stays a member of the cluster).
// Unless force, it refuses when the cluster would lose its healthy quorum.
func Stop(ctx context.Context, c *cluster.Cluster, name string, force bool) error {
	m, err := c.Member(name)
	if err != nil {
		return err
	}
	if !force {
		st, err := status.Get(ctx, c)
		if err != nil {
			return err
		}
		t, _ := st.Member(name)
		quorum := st.Cluster.VotingMembers/2 + 1
		if h := st.HealthyVoters(); t.Healthy && t.Role != "learner" && h-1 < quorum {
			return refusal.New(ErrQuorumAtRisk, "refusing to stop %s: %d of %d voting members would stay healthy and quorum needs %d; the cluster would stop serving",
				name, h-1, st.Cluster.VotingMembers, quorum)
		}
		// Stopping the leader leaves proposals waiting for an election
		// (and drops those forwarded to it); hand leadership over first.
		if to := pickTransferee(st, name); t.Role == "leader" && to != "" {
			c.Progress.Say("%s is the leader; moving leadership to %s first", name, to)
			if err := MoveLeader(ctx, c, to); err != nil {
				c.Progress.Say("could not move leadership (%v); stopping %s anyway", err, name)
			}
		}
	}
	ac, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	_, err = ac.Stop(ctx, name)
	return err
}

// Start starts a member's process again; refused while a restore's commit
// is unfinished (cluster.RequireNoRestorePending).
func Start(ctx context.Context, c *cluster.Cluster, name string) error {
	if err := cluster.RequireNoRestorePending(c.Dir, "start member "+name); err != nil {
		return err
	}
	m, err := c.Member(name)
	if err != nil {
		return err
	}
	ac, err := c.RuntimeFor(m)
	if err != nil {
		return err
	}
	if _, err := ac.PutMember(ctx, c.MemberConfig(m)); err != nil {
		return err
	}
	_, err = ac.Start(ctx, name)
	return err
}

// memberID finds a spec member's etcd ID by name, then by peer URL.
func memberID(ctx context.Context, c *cluster.Cluster, cli *clientv3.Client, m spec.Member) (uint64, bool, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return 0, false, fmt.Errorf("list members: %w", err)
	}
	for _, em := range list.Members {
		if em.Name == m.Name || slices.Contains(em.PeerURLs, m.PeerURL) {
			return em.ID, true, nil
		}
	}
	return 0, false, nil
}

// clientExcluding returns a client for every member but one.
func clientExcluding(c *cluster.Cluster, name string) (*clientv3.Client, error) {
	var eps []string
	for _, m := range c.Spec.Members {
		if m.Name != name {
			eps = append(eps, m.ClientURL)
		}
	}
	if len(eps) == 0 {
		return nil, fmt.Errorf("no member other than %s to talk to", name)
	}
	return c.Client(eps...)
}

// voterCounts counts voting members (a member that does not answer counts
// as voting) and the healthy ones among them other than exclude. A spec
// member etcd has no ID for (absent from its member list, as after a
// recovery from backup that restored one member) is not a voter.
func voterCounts(st *status.Status, exclude string) (voters, healthyOthers int) {
	for _, ms := range st.Members {
		if ms.Role == "learner" || ms.ID == "" && !ms.Healthy {
			continue
		}
		voters++
		if ms.Name != exclude && ms.Healthy {
			healthyOthers++
		}
	}
	return voters, healthyOthers
}

// The kinds of the plan steps that enable and end etcd's downgrade
// (pkg/upgrade's planner names its StepDowngradeStart and
// StepClusterVersion with them).
const (
	StepDowngradeEnable = "downgrade-enable"
	StepClusterVersion  = "cluster-version"
)

// requireNoDowngrade refuses a membership change that starts a new member
// while etcd's downgrade is enabled: a member's bootstrap asks its peers
// whether one is, and if so accepts only a cluster version one minor above
// its own binary's, which the cluster cannot have (enabling the downgrade
// set it to the target), so etcd would refuse to join whatever it runs.
// 3.6 and later members report the downgrade; 3.5 members say nothing, so
// the latest plan (nil: none) tells too: one that enabled the downgrade
// and has not reached the step that ends it.
//
// The refusal names what ends it: the plan that enabled the downgrade
// (finish it: ErrDowngradeOfPlan), or, when no open plan did (enabled by
// hand, or its plan aborted), etcd's own cancel.
func requireNoDowngrade(st *status.Status, latest *plan.Plan, what string) error {
	var open *plan.Step
	if latest != nil {
		open = latest.OpenSince(StepDowngradeEnable, StepClusterVersion)
	}
	for _, m := range st.Members {
		if m.DowngradeTarget == "" {
			continue
		}
		if open != nil {
			return refusal.New(ErrDowngradeOfPlan, "refusing to %s: etcd's downgrade to %s is enabled (%s says so), and etcd lets no member join until it ends; finish plan %s",
				what, m.DowngradeTarget, m.Name, latest.ID)
		}
		return refusal.New(ErrDowngradeInProgress, "refusing to %s: etcd's downgrade to %s is enabled (%s says so) by no open Steward plan, and etcd lets no member join until it ends; end it with `etcdctl downgrade cancel` (or finish the downgrade) first",
			what, m.DowngradeTarget, m.Name)
	}
	if open != nil {
		return refusal.New(ErrDowngradeOfPlan, "refusing to %s: plan %s enabled etcd's downgrade to %s and has not ended it yet, and etcd lets no member join until it ends; finish the plan",
			what, latest.ID, open.Version)
	}
	return nil
}

// latestPlan returns the Steward directory's latest plan, nil when there
// is none.
func latestPlan(c *cluster.Cluster) (*plan.Plan, error) {
	p, err := c.Plans().Latest()
	if errors.Is(err, plan.ErrNoPlan) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the plan store: %w", err)
	}
	return p, nil
}

func requireAllHealthy(st *status.Status, what string) error {
	if !st.Cluster.Quorate {
		return fmt.Errorf("refusing to %s: the cluster has no quorum: %s", what, st.Unhealthy())
	}
	if st.Cluster.HealthyMembers < len(st.Members) {
		return fmt.Errorf("refusing to %s while a member is unhealthy: %s", what, st.Unhealthy())
	}
	return nil
}

// addLearner adds a learner, retrying etcd's strict reconfiguration check.
func addLearner(ctx context.Context, cli *clientv3.Client, peerURL string) (resp *clientv3.MemberAddResponse, err error) {
	err = retryUnhealthy(ctx, func(ctx context.Context) error {
		resp, err = cli.MemberAddAsLearner(ctx, []string{peerURL})
		return err
	})
	return resp, err
}

// retryUnhealthy runs a membership change. etcd refuses membership changes
// until the leader has been connected to its peers for a few seconds (its
// strict reconfiguration check answers "unhealthy cluster"), for example
// just after start or a leader change, so that answer is retried for 30s.
func retryUnhealthy(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(actx)
		cancel()
		if err == nil || !errors.Is(err, rpctypes.ErrUnhealthy) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
