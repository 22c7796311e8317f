package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/coreos/go-semver/semver"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/datadir"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// Check is the outcome of one pre-flight check.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Overridable checks are skipped when the plan is forced
	// (Options.Force).
	Overridable bool   `json:"overridable"`
	Message     string `json:"message"`
	// Pushes are the binary pushes that fix what the binaries check found
	// on other hosts, each named after its words in Message (the command
	// says how: cli.CheckMessage).
	Pushes []Push `json:"pushes,omitempty"`
	// Binaries are the stored binaries' problems Message names, each in
	// its words (Problem.Message), this machine's and the hosts' (the
	// command names the command that fixes each inside them:
	// cli.CheckMessage).
	Binaries []binaries.Problem `json:"binaries,omitempty"`
}

// Push gives Hosts etcd Version from this machine's store: the hosts lack
// it, or (Replace) hold another build of it, their copy kept aside. After
// is the words of the check's message it fixes.
type Push struct {
	Version string   `json:"version"`
	Hosts   []string `json:"hosts"`
	Replace bool     `json:"replace,omitempty"`
	After   string   `json:"after"`
}

// Pre-flight check names (docs/upgrades.md lists them).
const (
	CheckHealthy   = "members-healthy"
	CheckVoters    = "no-learners"
	CheckAlarms    = "no-alarms"
	CheckLeader    = "stable-leader"
	CheckDBSize    = "db-size"
	CheckDisk      = "disk-space"
	CheckBinaries  = "binaries"
	CheckFlags     = "flags"
	CheckV2Store   = "v2store"
	dbQuotaPercent = 80
)

// Preflight runs the checks before moving every member from one version to
// another. It never changes anything.
func Preflight(ctx context.Context, c *cluster.Cluster, from, to string) ([]Check, error) {
	st, err := status.Get(ctx, c)
	if err != nil {
		return nil, err
	}
	var out []Check
	add := func(name string, overridable bool, problem string, okMsg string) {
		ch := Check{Name: name, OK: problem == "", Overridable: overridable, Message: okMsg}
		if problem != "" {
			ch.Message = problem
		}
		out = append(out, ch)
	}

	// Health, voters, alarms.
	var learners, alarms []string
	var maxDB int64
	allHealthy := st.Cluster.Quorate
	for _, m := range st.Members {
		allHealthy = allHealthy && m.Healthy
		if m.Role == "learner" {
			learners = append(learners, m.Name)
		}
		for _, a := range m.Alarms {
			alarms = append(alarms, m.Name+": "+a)
		}
		maxDB = max(maxDB, m.DBSize)
	}
	add(CheckHealthy, false, when(!allHealthy,
		"not every member is healthy: "+st.Unhealthy()+"; fix them first"),
		fmt.Sprintf("all %d members healthy", len(st.Members)))
	add(CheckVoters, false, when(len(learners) > 0,
		"learners wait for promotion: "+strings.Join(learners, ", ")),
		"every member votes")
	add(CheckAlarms, false, when(len(alarms) > 0,
		"alarms are raised: "+strings.Join(alarms, "; ")),
		"no alarms")

	// A stable leader: the same leader and term across a short interval.
	leader := st.Cluster.Leader
	time.Sleep(time.Second) // an interval to compare two observations, not synchronisation
	st2, err := status.Get(ctx, c)
	if err != nil {
		return nil, err
	}
	lm, _ := st.Member(leader)
	lm2, _ := st2.Member(st2.Cluster.Leader)
	add(CheckLeader, true, when(leader == "" || st2.Cluster.Leader != leader || lm.RaftTerm != lm2.RaftTerm,
		fmt.Sprintf("leadership is not stable (leader %q term %d, then %q term %d)", leader, lm.RaftTerm, st2.Cluster.Leader, lm2.RaftTerm)),
		fmt.Sprintf("leader %s, term %d", leader, lm.RaftTerm))

	quota := c.Spec.Etcd.QuotaBackendBytes
	if quota <= 0 {
		quota = spec.DefaultQuotaBackendBytes
	}
	add(CheckDBSize, true, when(maxDB*100 > quota*dbQuotaPercent,
		fmt.Sprintf("database is %s, over %d%% of the %s quota: compact and defragment first", progress.Bytes(maxDB), dbQuotaPercent, progress.Bytes(quota))),
		fmt.Sprintf("database %s of %s quota", progress.Bytes(maxDB), progress.Bytes(quota)))

	// Room for a backup and a copy of the data.
	need := 2 * uint64(maxDB)
	var fs syscall.Statfs_t
	if err := syscall.Statfs(c.Dir, &fs); err == nil {
		free := fs.Bavail * uint64(fs.Bsize)
		add(CheckDisk, true, when(free < need,
			fmt.Sprintf("%s free in %s, %s needed for a backup and a data copy", progress.Bytes(int64(free)), c.Dir, progress.Bytes(int64(need)))),
			fmt.Sprintf("%s free, %s needed", progress.Bytes(int64(free)), progress.Bytes(int64(need))))
	}

	// Binaries present and verified, and extra flags spelled for every
	// version on the way (an offline or restore plan runs each of them).
	cat, err := Catalogue(c.Dir)
	if err != nil {
		return nil, err
	}
	hops, err := cat.Path(from, to)
	if err != nil {
		return nil, err
	}
	store := binaries.Open(c.Spec.BinaryStoreDir(c.Dir))
	var binProblems, flagProblems, versions []string
	var pushes []Push
	var stored []binaries.Problem
	for _, h := range hops {
		versions = append(versions, h.To)
		if _, err := store.Resolve(h.To); err != nil {
			binProblems = append(binProblems, err.Error())
			if p, ok := binaries.ProblemOf(err); ok {
				stored = append(stored, p)
			}
		} else if _, err := store.Verify(ctx, h.To); err != nil && !(errors.Is(err, binaries.ErrNotFound) && h.To == binaries.EmbeddedVersion()) {
			// The embedded version needs no stored copy; a stored one must verify.
			binProblems = append(binProblems, err.Error())
		}
		if _, err := cat.Flags(h.To, c.Spec.Etcd.ExtraFlags); err != nil {
			flagProblems = append(flagProblems, err.Error())
		}
		// Every other host that runs a member runs it from its own store,
		// the same build as this machine's (the etcd SHA-256 of both
		// manifests; the embedded version has no stored copy to compare).
		localSums, _ := store.Sums(h.To)
		var lacking, differing []string
		used := hostset.Remote(c.Spec).Filter(func(a spec.Agent) bool { return c.Spec.Uses(a.Name) })
		checks := hostset.Each(ctx, used, hostset.Options{}, func(ctx context.Context, a spec.Agent) (memberrt.BinaryCheck, error) {
			ac, err := c.Runtime(a.Name)
			if err != nil {
				return memberrt.BinaryCheck{}, err
			}
			bc, err := ac.CheckBinary(ctx, h.To)
			if err == nil && bc.Problem != "" {
				err = errors.New(bc.Problem)
			}
			return bc, err
		})
		for _, r := range checks {
			a, bc, err := r.Host, r.Value, r.Err
			if err != nil {
				binProblems = append(binProblems, fmt.Sprintf("host %s: %v", a.Name, err))
				lacking = append(lacking, a.Name)
				if bc.ProblemKind != "" {
					stored = append(stored, binaries.Problem{Kind: bc.ProblemKind, Version: bc.Version, Store: bc.Store, Message: bc.Problem})
				}
				continue
			}
			if there := bc.Files["etcd"]; localSums["etcd"] != "" && there != "" && there != localSums["etcd"] {
				binProblems = append(binProblems, fmt.Sprintf("host %s: etcd %s in the binary store %s is another build than this machine's (sha256 %s there, %s here)",
					a.Name, h.To, bc.Store, short(there), short(localSums["etcd"])))
				differing = append(differing, a.Name)
			}
		}
		// One push per kind of fix: a plain one for the hosts lacking the
		// version, a replacing one (the host's copy kept aside) for another
		// build.
		if len(lacking) > 0 {
			p := Push{Version: h.To, Hosts: lacking, After: fmt.Sprintf("push etcd %s to those hosts from this machine's store", h.To)}
			binProblems, pushes = append(binProblems, p.After), append(pushes, p)
		}
		if len(differing) > 0 {
			p := Push{Version: h.To, Hosts: differing, Replace: true, After: fmt.Sprintf("replace their copy of etcd %s with this machine's (theirs is kept aside)", h.To)}
			binProblems, pushes = append(binProblems, p.After), append(pushes, p)
		}
	}
	list := strings.Join(versions, ", ")
	add(CheckBinaries, false, strings.Join(binProblems, "; "), "etcd "+list+" present and verified")
	out[len(out)-1].Pushes, out[len(out)-1].Binaries = pushes, stored
	add(CheckFlags, false, strings.Join(flagProblems, "; "), "extra flags valid for "+list)

	// Before 3.6: etcd's own check that the v2 store holds only membership.
	fv, tv := semver.New(from), semver.New(to)
	if fv.Minor < 6 && tv.Minor >= 6 {
		problem, stored := v2storeProblem(ctx, c, store, from)
		add(CheckV2Store, false, problem, "v2 store holds membership data only")
		out[len(out)-1].Binaries = stored
	}
	return out, nil
}

// ErrOverridableChecks refuses a plan that is not forced when overridable
// pre-flight checks failed (Options.Force skips them; other failed checks
// may remain). A command matches it (errors.Is) to name its flag.
var ErrOverridableChecks = errors.New("overridable pre-flight checks failed")

// ChecksError is Refusal's error: its message lists the failed checks
// (one "NAME: MESSAGE" line each), Failed holds them, so that a command
// adds its advice after a check's message (cli.LibraryAdvice, by check
// name: the commands that fix what the check found). Its Kind is
// ErrOverridableChecks when an overridable check is among them, else nil.
type ChecksError struct {
	refusal.Refusal
	Failed []Check
}

// Refusal turns failed checks into an error (a *ChecksError); with force,
// overridable failures are returned as warnings instead.
func Refusal(checks []Check, force bool) (warnings []string, err error) {
	var problems []string
	var failed []Check
	overridable := false
	for _, ch := range checks {
		switch {
		case ch.OK:
		case ch.Overridable && force:
			warnings = append(warnings, fmt.Sprintf("%s: %s (overridden: the plan is forced)", ch.Name, ch.Message))
		case ch.Overridable:
			overridable = true
			problems = append(problems, fmt.Sprintf("%s: %s (overridable)", ch.Name, ch.Message))
			failed = append(failed, ch)
		default:
			problems = append(problems, fmt.Sprintf("%s: %s", ch.Name, ch.Message))
			failed = append(failed, ch)
		}
	}
	if len(problems) == 0 {
		return warnings, nil
	}
	e := &ChecksError{Failed: failed}
	e.Msg = "pre-flight checks failed; nothing was changed:\n  " + strings.Join(problems, "\n  ")
	if overridable {
		e.Kind = ErrOverridableChecks
	}
	return warnings, e
}

// short is the start of a SHA-256, enough to tell two apart.
func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

func when(cond bool, msg string) string {
	if cond {
		return msg
	}
	return ""
}

// v2storeProblem runs `etcdutl check v2store` (etcd's own check before
// 3.6) on a copy of one member's data dir: the tool refuses a data dir in
// use. The copy leaves the member untouched.
func v2storeProblem(ctx context.Context, c *cluster.Cluster, store *binaries.Store, from string) (string, []binaries.Problem) {
	if v, ok := c.Spec.Etcd.ExtraFlags["enable-v2"]; ok && v != "false" {
		return "extraFlags set --enable-v2: migrate v2 data and remove the flag before 3.6 (etcd's upgrade guide)", nil
	}
	m := c.Spec.Members[0]
	if c.OnOtherHost(m) {
		// The data dir and the etcdutl that checks it are on that host:
		// its agent runs the check there.
		ac, err := c.Runtime(m.Agent)
		if err != nil {
			return err.Error(), nil
		}
		res, err := ac.CheckV2Store(ctx, m.Name, from)
		if err != nil {
			return fmt.Sprintf("v2 store check of %s on host %s: %v", m.Name, m.Agent, err), nil
		}
		return res.Problem, nil
	}
	util, err := store.Tool(from, "etcdutl")
	if err != nil {
		msg := fmt.Sprintf("%v, so etcd's v2 store check cannot run: import etcd %s with its etcdutl", err, from)
		if p, ok := binaries.ProblemOf(err); ok {
			return msg, []binaries.Problem{p}
		}
		return msg, nil
	}
	problem, err := datadir.CheckV2Store(ctx, util, spec.Path(c.Dir, m.DataDir), c.Dir)
	if err != nil {
		return err.Error(), nil
	}
	if problem != "" {
		return fmt.Sprintf("etcdutl check v2store on a copy of %s: %s", m.Name, problem), nil
	}
	return "", nil
}
