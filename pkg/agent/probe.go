package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/memberlease"
)

// Readiness of the agent's members, for a pod's readinessProbe (the client
// Service sends traffic only to ready members) and for its member lease
// (lease.go). A member is ready when:
//
//   - its agent wants it running and its process is Running (started and
//     answering /version): a member stopped for an operation (stop,
//     restart, version swap: member.halt sets desired false and the state
//     Stopping at once), a data dir moved aside or staged for a restore
//     (both refused unless the member is stopped: Agent.stoppedConfig) or
//     a member starting again is not;
//   - etcd's status of the member itself answers, names a leader, reports
//     no error (an alarm) and says it is not a learner;
//   - for /readyz, it has applied the leader's committed index within
//     MaxProbeLag entries (the leader's status, asked at its client URL
//     from the member list), so a member rebuilt or restarted gets client
//     traffic only once caught up.
//
// The lease needs the first two (started, voting, healthy), not the
// catch-up.

// MaxProbeLag is how many entries a member may have left to apply behind
// the leader's commit index and still be ready.
const MaxProbeLag = 1000

// probeTimeout bounds one readiness check of every member (a kubelet's
// probe gives up after its timeoutSeconds: set it above this).
const probeTimeout = 3 * time.Second

// Reasons a member is not ready (MemberReadiness.Reason).
const (
	ReasonReady       = "Ready"
	ReasonNoMember    = "NoMember"    // the agent runs no such member (yet)
	ReasonStopped     = "Stopped"     // not wanted running: stopped for an operation
	ReasonNotStarted  = "NotStarted"  // wanted running, not Running (starting, restarting, failing)
	ReasonUnreachable = "Unreachable" // etcd's status did not answer
	ReasonLearner     = "Learner"     // a learner: not a voting member yet
	ReasonNoLeader    = "NoLeader"    // the member knows no leader
	ReasonErrors      = "Errors"      // etcd reports errors (alarms)
	ReasonBehind      = "Behind"      // more than MaxProbeLag behind the leader
	ReasonPrivateURL  = "PrivateURL"  // on a private client URL (a learner being added): no client is sent there
)

// MemberReadiness is one member's readiness as its agent sees it, as
// /readyz reports it.
type MemberReadiness struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
	// Reason is ReasonReady or why not (one of the Reason constants).
	Reason string `json:"reason"`
	// Message says more about a reason other than Ready.
	Message string `json:"message,omitempty"`
	// ID is etcd's member ID in hex, once etcd answered.
	ID string `json:"id,omitempty"`
	// Role is Leader, Member or Learner, once etcd answered.
	Role string `json:"role,omitempty"`
	// Lag is how many entries the member had left to apply behind the
	// leader's commit index (0 for the leader, or when not asked).
	Lag uint64 `json:"lag,omitempty"`

	id     uint64 // for the lease
	leader bool
}

// Readiness is /readyz's answer.
type Readiness struct {
	Ready   bool              `json:"ready"`
	Members []MemberReadiness `json:"members"`
}

// Readiness checks the members named (every member of the agent when none
// is named: a member pod's agent runs one). It is ready when every member
// checked is, and there is at least one.
func (a *Agent) Readiness(ctx context.Context, names ...string) Readiness {
	if len(names) == 0 {
		a.mu.Lock()
		for n := range a.members {
			names = append(names, n)
		}
		a.mu.Unlock()
		sort.Strings(names)
	}
	r := Readiness{Ready: len(names) > 0, Members: []MemberReadiness{}}
	for _, n := range names {
		mr := a.memberReadiness(ctx, n, true)
		r.Ready = r.Ready && mr.Ready
		r.Members = append(r.Members, mr)
	}
	return r
}

// memberReadiness checks one member; caughtUp adds the check against the
// leader.
func (a *Agent) memberReadiness(ctx context.Context, name string, caughtUp bool) (mr MemberReadiness) {
	mr.Name = name
	no := func(reason, format string, args ...any) MemberReadiness {
		mr.Ready, mr.Reason, mr.Message = false, reason, fmt.Sprintf(format, args...)
		return mr
	}
	m, ok := a.member(name)
	if !ok {
		return no(ReasonNoMember, "this agent runs no member %s", name)
	}
	// running says why the member is not a running process (Stopped,
	// NotStarted), or "" with the process and the config it runs with.
	running := func() (string, string, *process, agentapi.MemberConfig) {
		m.mu.Lock()
		defer m.mu.Unlock()
		cfg := m.cfg
		if m.runningCfg != nil {
			cfg = *m.runningCfg // the URL the process listens on
		}
		switch {
		case !m.desired:
			return ReasonStopped, fmt.Sprintf("member %s is stopped (state %s)", name, m.state), nil, cfg
		case m.state != agentapi.StateRunning:
			return ReasonNotStarted, fmt.Sprintf("member %s is %s", name, m.state), nil, cfg
		case cfg.PrivateClientURL:
			// Promoted or not, it serves clients only once restarted on
			// its own URL: ready before that, a pod's Service would send
			// clients where nothing listens.
			return ReasonPrivateURL, fmt.Sprintf("member %s runs on the private client URL %s, not yet on its own", name, cfg.ClientURL), nil, cfg
		}
		return "", "", m.proc, cfg
	}
	reason, msg, p, cfg := running()
	if reason != "" {
		return no(reason, "%s", msg)
	}
	// What etcd said is of the process that ran when the check began: a
	// stop or restart that began meanwhile makes the member not ready.
	defer func() {
		if reason, msg, now, _ := running(); reason != "" || now != p {
			if reason == "" {
				reason, msg = ReasonNotStarted, fmt.Sprintf("member %s restarted during the check", name)
			}
			mr.Ready, mr.Reason, mr.Message, mr.Lag = false, reason, msg, 0
		}
	}()
	cli, err := memberClient(cfg)
	if err != nil {
		return no(ReasonUnreachable, "member %s: %v", name, err)
	}
	defer cli.Close()
	st, err := cli.Status(ctx, cfg.ClientURL)
	if err != nil {
		return no(ReasonUnreachable, "member %s: etcd status: %v", name, err)
	}
	mr.id = st.Header.MemberId
	mr.ID = fmt.Sprintf("%x", st.Header.MemberId)
	mr.leader = st.Leader != 0 && st.Leader == st.Header.MemberId
	switch {
	case st.IsLearner:
		mr.Role = "Learner"
	case mr.leader:
		mr.Role = string(memberlease.RoleLeader)
	default:
		mr.Role = string(memberlease.RoleMember)
	}
	switch {
	case st.IsLearner:
		return no(ReasonLearner, "member %s is a learner: not a voting member yet", name)
	case st.Leader == 0:
		return no(ReasonNoLeader, "member %s knows no leader", name)
	case len(st.Errors) > 0:
		return no(ReasonErrors, "member %s reports: %s", name, strings.Join(st.Errors, "; "))
	}
	if caughtUp && !mr.leader {
		lead, err := leaderStatus(ctx, cli, st.Leader)
		if err != nil {
			return no(ReasonUnreachable, "member %s: the leader's status: %v", name, err)
		}
		if lead.RaftIndex > st.RaftAppliedIndex {
			mr.Lag = lead.RaftIndex - st.RaftAppliedIndex
		}
		if mr.Lag > MaxProbeLag {
			return no(ReasonBehind, "member %s applied %d, the leader committed %d: %d behind (at most %d)", name, st.RaftAppliedIndex, lead.RaftIndex, mr.Lag, MaxProbeLag)
		}
	}
	mr.Ready, mr.Reason = true, ReasonReady
	return mr
}

// leaderStatus asks the leader (by ID) for its status at its client URLs,
// from the member list.
func leaderStatus(ctx context.Context, cli *clientv3.Client, leader uint64) (*clientv3.StatusResponse, error) {
	ml, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("member list: %w", err)
	}
	for _, m := range ml.Members {
		if m.ID != leader {
			continue
		}
		var errs []error
		for _, u := range m.ClientURLs {
			st, err := cli.Status(ctx, u)
			if err == nil {
				return st, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", u, err))
		}
		if len(errs) == 0 {
			return nil, fmt.Errorf("leader %x has no client URL", leader)
		}
		return nil, errors.Join(errs...)
	}
	return nil, fmt.Errorf("leader %x is not in the member list", leader)
}

// memberClient is an etcd client of one member with the certificate the
// agent holds for it (memberClientTLS).
func memberClient(cfg agentapi.MemberConfig) (*clientv3.Client, error) {
	c := clientv3.Config{Endpoints: []string{cfg.ClientURL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if t := cfg.TLS; t != nil {
		tc, err := memberClientTLS(t)
		if err != nil {
			return nil, err
		}
		c.TLS = tc
	}
	return clientv3.New(c)
}

// ProbeHandler serves the pod's probes over plain HTTP:
//
//	GET /livez              200 while the agent runs
//	GET /readyz[?member=N]  200 when every member (or N) is ready, else 503;
//	                        the body is Readiness as JSON
func (a *Agent) ProbeHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), probeTimeout)
		defer cancel()
		var names []string
		if n := r.URL.Query().Get("member"); n != "" {
			names = []string{n}
		}
		rd := a.Readiness(ctx, names...)
		w.Header().Set("Content-Type", "application/json")
		if !rd.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(rd)
	})
	return mux
}

// ServeProbes listens on addr (HOST:PORT) at once, so a bad address is an
// error here, and serves ProbeHandler until ctx ends; stop waits for the
// server to close.
func (a *Agent) ServeProbes(ctx context.Context, addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("probe address: %w", err)
	}
	srv := &http.Server{Handler: a.ProbeHandler(), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("probe server", "err", err)
		}
	}()
	ctxDone := make(chan struct{})
	var closeOnce sync.Once
	go func() {
		select {
		case <-ctx.Done():
		case <-ctxDone:
		}
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	a.log.Info("serving probes", "address", ln.Addr().String())
	return func() {
		closeOnce.Do(func() { close(ctxDone) })
		<-done
	}, nil
}
