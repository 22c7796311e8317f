// Package memberrttest is an in-memory memberrt.Runtime for unit tests: it records the calls and holds member states, and runs no process.
package memberrttest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/etcd-steward/steward/pkg/memberrt"
)

var _ memberrt.Runtime = (*Runtime)(nil)

// Runtime holds members in memory. A refused method returns its error
// from Refuse and changes nothing.
type Runtime struct {
	mu      sync.Mutex
	calls   []string
	members map[string]*member
	// Refuse maps a method name ("SwapVersion"), or a method and the
	// member it names ("Kill etcd-2"), to the error it returns.
	Refuse map[string]error
}

type member struct {
	cfg    memberrt.MemberConfig
	status memberrt.MemberStatus
}

// New returns a runtime that runs no member yet.
func New() *Runtime { return &Runtime{members: map[string]*member{}, Refuse: map[string]error{}} }

// Run adds a member in state (memberrt.StateRunning, ...) on version, as
// if configured and started earlier; it records no call.
func (r *Runtime) Run(name, version, state string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	desired := "running"
	if state == memberrt.StateStopped {
		desired = "stopped"
	}
	r.members[name] = &member{
		cfg:    memberrt.MemberConfig{Name: name, Version: version},
		status: memberrt.MemberStatus{Name: name, Version: version, State: state, Desired: desired},
	}
}

// Calls returns the calls so far, one line each: the method and its
// arguments ("SwapVersion etcd-1 3.6.16", "PutMember etcd-1 3.6.16").
func (r *Runtime) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// Config returns the config a member was last given.
func (r *Runtime) Config(name string) (memberrt.MemberConfig, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.members[name]
	if !ok {
		return memberrt.MemberConfig{}, false
	}
	return m.cfg, true
}

// call records a call and says whether the method is refused.
func (r *Runtime) call(method string, args ...string) error {
	r.calls = append(r.calls, strings.Join(append([]string{method}, args...), " "))
	if len(args) > 0 {
		if err, ok := r.Refuse[method+" "+args[0]]; ok {
			return err
		}
	}
	return r.Refuse[method]
}

func (r *Runtime) get(name string) (*member, error) {
	m, ok := r.members[name]
	if !ok {
		return nil, fmt.Errorf("member %s: %w", name, memberrt.ErrNotFound)
	}
	return m, nil
}

// set changes a known member's state and version ("" keeps it).
func (r *Runtime) set(name, state, version string) (memberrt.MemberStatus, error) {
	m, err := r.get(name)
	if err != nil {
		return memberrt.MemberStatus{}, err
	}
	m.status.State = state
	m.status.Desired = "stopped"
	m.status.PID = 0
	if state == memberrt.StateRunning {
		m.status.Desired = "running"
		m.status.PID = 1
		m.status.StartedAt = time.Now()
	}
	if version != "" {
		m.cfg.Version = version
	}
	m.status.Version = m.cfg.Version
	return m.status, nil
}

func (r *Runtime) Ping(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.call("Ping")
}

func (r *Runtime) Members(ctx context.Context) ([]memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("Members"); err != nil {
		return nil, err
	}
	var out []memberrt.MemberStatus
	for _, m := range r.members {
		out = append(out, m.status)
	}
	slices.SortFunc(out, func(a, b memberrt.MemberStatus) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (r *Runtime) Member(ctx context.Context, name string) (memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("Member", name); err != nil {
		return memberrt.MemberStatus{}, err
	}
	m, err := r.get(name)
	if err != nil {
		return memberrt.MemberStatus{}, err
	}
	return m.status, nil
}

func (r *Runtime) PutMember(ctx context.Context, cfg memberrt.MemberConfig) (memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("PutMember", cfg.Name, cfg.Version); err != nil {
		return memberrt.MemberStatus{}, err
	}
	m, ok := r.members[cfg.Name]
	if !ok {
		m = &member{status: memberrt.MemberStatus{Name: cfg.Name, Version: cfg.Version, State: memberrt.StateStopped, Desired: "stopped"}}
		r.members[cfg.Name] = m
	}
	m.cfg = cfg
	m.status.DataDir, m.status.ClientURL, m.status.PeerURL = cfg.DataDir, cfg.ClientURL, cfg.PeerURL
	m.status.ConfigPending = m.status.State == memberrt.StateRunning && m.status.Version != cfg.Version
	return m.status, nil
}

func (r *Runtime) DeleteMember(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("DeleteMember", name); err != nil {
		return err
	}
	if _, err := r.get(name); err != nil {
		return err
	}
	delete(r.members, name)
	return nil
}

func (r *Runtime) DeleteMemberAside(ctx context.Context, name, reason string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("DeleteMemberAside", name, reason); err != nil {
		return "", err
	}
	m, err := r.get(name)
	if err != nil {
		return "", err
	}
	delete(r.members, name)
	return m.cfg.DataDir + "." + reason, nil
}

func (r *Runtime) Start(ctx context.Context, name string) (memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("Start", name); err != nil {
		return memberrt.MemberStatus{}, err
	}
	return r.set(name, memberrt.StateRunning, "")
}

func (r *Runtime) Stop(ctx context.Context, name string) (memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("Stop", name); err != nil {
		return memberrt.MemberStatus{}, err
	}
	return r.set(name, memberrt.StateStopped, "")
}

func (r *Runtime) Kill(ctx context.Context, name string) (memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("Kill", name); err != nil {
		return memberrt.MemberStatus{}, err
	}
	return r.set(name, memberrt.StateStopped, "")
}

func (r *Runtime) Restart(ctx context.Context, name string) (memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("Restart", name); err != nil {
		return memberrt.MemberStatus{}, err
	}
	return r.set(name, memberrt.StateRunning, "")
}

func (r *Runtime) SwapVersion(ctx context.Context, name string, req memberrt.VersionRequest) (memberrt.MemberStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	args := []string{name, req.Version}
	if req.AllowMinorDowngrade {
		args = append(args, "allow-minor-downgrade")
	}
	if err := r.call("SwapVersion", args...); err != nil {
		return memberrt.MemberStatus{}, err
	}
	return r.set(name, memberrt.StateRunning, req.Version)
}

func (r *Runtime) StageDataDir(ctx context.Context, name, snapshot string, _ memberrt.StageTarget) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("StageDataDir", name, snapshot); err != nil {
		return "", err
	}
	m, err := r.get(name)
	if err != nil {
		return "", err
	}
	return m.cfg.DataDir + ".staged", nil
}

func (r *Runtime) CommitDataDir(ctx context.Context, name, staged string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("CommitDataDir", name, staged); err != nil {
		return "", err
	}
	m, err := r.get(name)
	if err != nil {
		return "", err
	}
	return m.cfg.DataDir + ".old", nil
}

func (r *Runtime) DiscardStaged(ctx context.Context, name, staged string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.call("DiscardStaged", name, staged)
}

// Applied reports zero indexes: the fake holds no data.
func (r *Runtime) Applied(ctx context.Context, name string) (memberrt.AppliedIndex, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("Applied", name); err != nil {
		return memberrt.AppliedIndex{}, err
	}
	_, err := r.get(name)
	return memberrt.AppliedIndex{}, err
}

// FetchDatabase writes nothing: the fake holds no data.
func (r *Runtime) FetchDatabase(ctx context.Context, name, dst string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("FetchDatabase", name, dst); err != nil {
		return err
	}
	_, err := r.get(name)
	return err
}

func (r *Runtime) CheckBinary(ctx context.Context, version string) (memberrt.BinaryCheck, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.call("CheckBinary", version); err != nil {
		return memberrt.BinaryCheck{}, err
	}
	return memberrt.BinaryCheck{Version: version}, nil
}

func (r *Runtime) CheckV2Store(ctx context.Context, name, version string) (memberrt.V2StoreCheck, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return memberrt.V2StoreCheck{}, r.call("CheckV2Store", name, version)
}
