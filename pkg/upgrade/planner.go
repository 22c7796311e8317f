// Package upgrade plans and runs etcd version changes of a Steward cluster:
// upgrades one minor line at a time and rollbacks to the version a cluster
// had before its last plan. Plans are computed from the live cluster and the
// version catalogue, persisted with package plan, and executed step by step
// by Executor, whose every step is idempotent.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-semver/semver"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/rolling"
	"github.com/etcd-steward/steward/pkg/status"
)

// Strategies.
const (
	// StrategyRolling swaps members one at a time, in place: followers
	// first, the leader last after leadership moved away. No loss of
	// availability with three or more members.
	StrategyRolling = "rolling"
	// StrategyOffline is for a single member: stop, step through each
	// intermediate minor on ports no client uses, start the target.
	StrategyOffline = "offline"
	// StrategyRestore starts the target version on fresh data dirs
	// restored from a backup, keeping the old ones for rollback.
	StrategyRestore = "restore"
)

// Step kinds.
const (
	StepPreflight      = "preflight"
	StepBackup         = "backup"
	StepMember         = "member"
	StepDowngradeStart = membership.StepDowngradeEnable
	StepStorageVersion = "storage-version"
	StepClusterVersion = membership.StepClusterVersion
	// StepOffline runs one member on an intermediate version on private
	// ports until a write succeeds, then stops it (offline strategy).
	StepOffline = "offline"
	// StepReplace stops every member and restores fresh data dirs from
	// the stopped database (restore strategy); the old dirs are kept.
	StepReplace = "replace"
	// StepStart starts every member on the target version and waits until
	// all are healthy (restore strategy).
	StepStart = "start"
)

// Options shape a plan.
type Options struct {
	// To is the target etcd version.
	To string
	// Strategy is rolling, offline or restore; empty chooses.
	Strategy string
	// Force skips the pre-flight checks documented as overridable.
	Force bool
	// HealthTimeout bounds each wait of a step (default 2 minutes).
	HealthTimeout time.Duration

	// baseBackup is the backup the undone upgrade took before it began:
	// a rollback by restore starts from it.
	baseBackup string
}

// Catalogue loads the version catalogue of a Steward directory.
func Catalogue(dir string) (*catalogue.Catalogue, error) {
	return catalogue.Load(filepath.Join(dir, catalogue.FileName))
}

// NewPlan computes an upgrade (or downgrade) plan from the live cluster to
// o.To. It does not save it.
func NewPlan(ctx context.Context, c *cluster.Cluster, o Options) (*plan.Plan, error) {
	to, err := binaries.NormalizeVersion(o.To)
	if err != nil {
		return nil, err
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return nil, err
	}
	from, err := uniformVersion(c, st)
	if err != nil {
		return nil, err
	}
	return build(ctx, c, st, plan.KindUpgrade, from, to, o, false)
}

// uniformVersion returns the one version every member runs, or an error
// naming who runs what.
func uniformVersion(c *cluster.Cluster, st *status.Status) (string, error) {
	versions := map[string][]string{}
	for _, m := range c.Spec.Members {
		v := c.Spec.VersionOf(m)
		if ms, ok := st.Member(m.Name); ok && ms.Version != "" {
			v = ms.Version
		}
		versions[v] = append(versions[v], m.Name)
	}
	if len(versions) == 1 {
		for v := range versions {
			return v, nil
		}
	}
	var parts []string
	for _, v := range slices.Sorted(maps.Keys(versions)) {
		parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(versions[v], ",")))
	}
	return "", refusal.New(ErrMixedVersions, "members run different etcd versions (%s): resume or roll back the last plan first", strings.Join(parts, "; "))
}

// ErrMixedVersions refuses a plan while members run different etcd
// versions (a plan stopped part way); the command names the one that
// shows that plan (cli.LibraryAdvice).
var ErrMixedVersions = errors.New("members run different etcd versions")

// build turns the catalogue's path into steps. revert first brings members
// that run ahead of from back to it (a rollback of a plan that stopped
// halfway).
func build(ctx context.Context, c *cluster.Cluster, st *status.Status, kind plan.Kind, from, to string, o Options, revert bool) (*plan.Plan, error) {
	cat, err := Catalogue(c.Dir)
	if err != nil {
		return nil, err
	}
	hops, err := cat.Path(from, to)
	if err != nil {
		return nil, err
	}
	if len(hops) == 0 {
		return nil, fmt.Errorf("the cluster already runs etcd %s", to)
	}
	strategy := o.Strategy
	if strategy == "" {
		strategy = chooseStrategy(len(c.Spec.Members), hops)
	}
	if err := checkStrategy(strategy, len(c.Spec.Members), hops, o.baseBackup); err != nil {
		return nil, err
	}
	if strategy != StrategyRolling {
		// Each member's host builds its new data dir (or runs it on
		// private ports): its agent must be able to.
		if err := c.RequireCapability(ctx, "the "+strategy+" strategy", cluster.CapRebuildDataDirs, c.Spec.Members...); err != nil {
			return nil, err
		}
	}
	now := time.Now().UTC()
	p := &plan.Plan{ID: plan.NewID(kind, now), Kind: kind,
		State: plan.Pending, CreatedAt: now, Force: o.Force, HealthTimeoutSeconds: int(o.HealthTimeout / time.Second)}
	if err := plan.SetPayload(p, Payload{From: from, To: to, Strategy: strategy}); err != nil {
		return nil, err
	}
	add := func(s plan.Step) {
		s.Index, s.State = len(p.Steps), plan.Pending
		p.Steps = append(p.Steps, s)
	}
	order := memberOrder(c, st)
	if revert && strategy != StrategyRestore {
		for _, name := range order {
			add(plan.Step{Kind: StepMember, Member: name, Version: from,
				Description: fmt.Sprintf("bring %s back to %s (the cluster version never left %s)", name, from, minorOf(from))})
		}
		add(plan.Step{Kind: StepClusterVersion, Version: from, Description: fmt.Sprintf("wait until every member runs %s; record it in the spec", from)})
	}
	switch strategy {
	case StrategyOffline:
		addOffline(add, hops, order[0], from, to)
		return p, nil
	case StrategyRestore:
		if hops[0].Kind == catalogue.Downgrade {
			p.SetValue("base-backup", o.baseBackup)
			addRestoreBack(add, from, to, o.baseBackup)
		} else {
			addRestore(add, hops, from, to)
		}
		return p, nil
	}
	for i, h := range hops {
		if i > 0 {
			// Every other hop swaps the members in reverse: the member
			// that took leadership at the end of a hop (the executor hands
			// it to the one swapped last in the next hop, transferee) is
			// then swapped last again, so each hop moves leadership once.
			slices.Reverse(order)
		}
		add(plan.Step{Kind: StepPreflight, Version: h.To, Description: fmt.Sprintf("pre-flight checks for %s %s to %s", h.Kind, h.From, h.To)})
		add(plan.Step{Kind: StepBackup, Version: h.From, Description: fmt.Sprintf("verified full backup before %s to %s", h.Kind, h.To)})
		if h.Kind == catalogue.Downgrade {
			add(plan.Step{Kind: StepDowngradeStart, Version: h.To, Description: fmt.Sprintf("validate and enable etcd's downgrade to %s", minorOf(h.To))})
			add(plan.Step{Kind: StepStorageVersion, Version: h.To, Description: fmt.Sprintf("wait until every member's storage version is %s", minorOf(h.To))})
		}
		for _, name := range order {
			add(plan.Step{Kind: StepMember, Member: name, Version: h.To,
				Description: fmt.Sprintf("swap %s from %s to %s (%s), wait until healthy and caught up", name, h.From, h.To, h.Kind)})
		}
		add(plan.Step{Kind: StepClusterVersion, Version: h.To, Description: fmt.Sprintf("wait for cluster version %s; record %s in the spec", minorOf(h.To)+".0", h.To)})
	}
	return p, nil
}

// via lists the intermediate versions of a path.
func via(hops []catalogue.Hop) []string {
	var out []string
	for _, h := range hops[:len(hops)-1] {
		out = append(out, h.To)
	}
	return out
}

// pathWords describes a path: "A to B", with " through X, Y" when there
// are intermediate versions.
func pathWords(hops []catalogue.Hop, from, to string) string {
	what := fmt.Sprintf("%s to %s", from, to)
	if v := via(hops); len(v) > 0 {
		what += " through " + strings.Join(v, ", ")
	}
	return what
}

// addRestore adds the steps of the replace-via-restore strategy: a
// backup, then, while every member is stopped, fresh data dirs restored
// from the stopped database, each intermediate version run on them on
// private client ports, and the target started on the members' own ports.
func addRestore(add func(plan.Step), hops []catalogue.Hop, from, to string) {
	what := pathWords(hops, from, to)
	add(plan.Step{Kind: StepPreflight, Version: to, Description: "pre-flight checks for the upgrade by restore " + what})
	add(plan.Step{Kind: StepBackup, Version: from, Description: "verified full backup before the upgrade by restore " + what})
	add(plan.Step{Kind: StepReplace, Version: to, Description: "stop every member; restore fresh data dirs from the stopped database (the old ones are kept for rollback)"})
	for _, v := range via(hops) {
		add(plan.Step{Kind: StepOffline, Version: v, Description: fmt.Sprintf("run every member on %s on private client ports until a write succeeds, then stop them", v)})
	}
	add(plan.Step{Kind: StepStart, Version: to, Description: fmt.Sprintf("start every member on %s on its own ports, wait until all are healthy", to)})
	add(plan.Step{Kind: StepClusterVersion, Version: to, Description: fmt.Sprintf("wait for cluster version %s; record %s in the spec", minorOf(to)+".0", to)})
}

// addRestoreBack adds the steps of a rollback by restore: a backup of the
// cluster as it is, then, while every member is stopped, fresh data dirs
// holding the backup taken before the upgrade with the current keyspace
// grafted in, started on the old version.
func addRestoreBack(add func(plan.Step), from, to, base string) {
	add(plan.Step{Kind: StepPreflight, Version: to, Description: fmt.Sprintf("pre-flight checks for the rollback by restore %s to %s", from, to)})
	add(plan.Step{Kind: StepBackup, Version: from, Description: fmt.Sprintf("verified full backup of the cluster on %s before going back", from)})
	add(plan.Step{Kind: StepReplace, Version: to, Description: fmt.Sprintf("stop every member; fresh data dirs from backup %s (taken on %s) with every write made since grafted in (the old ones are kept)", base, to)})
	add(plan.Step{Kind: StepStart, Version: to, Description: fmt.Sprintf("start every member on %s on its own ports, wait until all are healthy", to)})
	add(plan.Step{Kind: StepClusterVersion, Version: to, Description: fmt.Sprintf("wait for cluster version %s; record %s in the spec", minorOf(to)+".0", to)})
}

// addOffline adds the steps of the offline strategy: one pre-flight and
// one backup for the whole path, each intermediate version run on private
// ports, then the target started on the member's own ports.
func addOffline(add func(plan.Step), hops []catalogue.Hop, member, from, to string) {
	what := pathWords(hops, from, to)
	add(plan.Step{Kind: StepPreflight, Version: to, Description: "pre-flight checks for the offline upgrade " + what})
	add(plan.Step{Kind: StepBackup, Version: from, Description: "verified full backup before the offline upgrade " + what})
	for _, v := range via(hops) {
		add(plan.Step{Kind: StepOffline, Member: member, Version: v,
			Description: fmt.Sprintf("run %s on %s on private ports until a write succeeds, then stop it", member, v)})
	}
	add(plan.Step{Kind: StepMember, Member: member, Version: to,
		Description: fmt.Sprintf("start %s on %s on its own ports, wait until healthy", member, to)})
	add(plan.Step{Kind: StepClusterVersion, Version: to, Description: fmt.Sprintf("wait for cluster version %s; record %s in the spec", minorOf(to)+".0", to)})
}

// chooseStrategy picks the strategy when none is asked for: etcd's online
// downgrade to go back where every hop has one, a restore where one has
// not; offline for a single member; rolling otherwise.
func chooseStrategy(members int, hops []catalogue.Hop) string {
	for _, h := range hops {
		if h.Kind == catalogue.Downgrade && !h.Online {
			return StrategyRestore
		}
	}
	if hops[0].Kind == catalogue.Downgrade || members > 1 {
		return StrategyRolling
	}
	return StrategyOffline
}

// ErrNoOnlineDowngrade refuses the rolling strategy on a way back across a
// minor line that etcd has no online downgrade for; StrategyRestore takes
// it. A command matches it (errors.Is) to name its flag.
var ErrNoOnlineDowngrade = errors.New("no online downgrade")

// checkStrategy refuses a strategy that cannot take this path.
func checkStrategy(strategy string, members int, hops []catalogue.Hop, base string) error {
	switch strategy {
	case StrategyRolling:
		for _, h := range hops {
			if h.Kind == catalogue.Downgrade && !h.Online {
				return refusal.New(ErrNoOnlineDowngrade, "etcd %s has no online downgrade to %s: the rolling strategy cannot go back there, a restore can",
					minorOf(h.From), minorOf(h.To))
			}
		}
	case StrategyOffline:
		if members != 1 {
			return fmt.Errorf("strategy offline is for a single member and this cluster has %d: use rolling (in place, no downtime) or restore", members)
		}
		for _, h := range hops {
			if h.Kind == catalogue.Downgrade {
				return fmt.Errorf("strategy offline only upgrades: going back from %s to %s uses etcd's online downgrade (rolling) or a restore", h.From, h.To)
			}
		}
	case StrategyRestore:
		if hops[0].Kind == catalogue.Downgrade && base == "" {
			return fmt.Errorf("going back from %s to %s by restore needs the backup the upgrade took before it began, and none is recorded", hops[0].From, hops[len(hops)-1].To)
		}
	default:
		return fmt.Errorf("unknown strategy %q: use rolling, offline or restore", strategy)
	}
	return nil
}

// memberOrder is followers first (spec order), the current leader last.
// The executor moves leadership away from whichever member it swaps, so a
// leader change after planning costs a move, not availability.
func memberOrder(c *cluster.Cluster, st *status.Status) []string {
	var names []string
	for _, m := range c.Spec.Members {
		names = append(names, m.Name)
	}
	return rolling.Order(names, st.Cluster.Leader)
}

// ErrNoUpgrade: no upgrade plan that was not rolled back already, so no
// rollback to plan; nothing is changed.
var ErrNoUpgrade = errors.New("no upgrade plan to roll back")

// NewRollback plans the way back to the version the cluster had before the
// last upgrade plan (ErrNoUpgrade without one).
func NewRollback(ctx context.Context, c *cluster.Cluster, o Options) (*plan.Plan, *plan.Plan, error) {
	store := c.Plans()
	last, err := lastUpgrade(store)
	if err != nil {
		return nil, nil, err
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	from, mixed, err := rollbackStart(c, st)
	if err != nil {
		return nil, nil, err
	}
	lv, err := PayloadOf(last)
	if err != nil {
		return nil, nil, fmt.Errorf("roll back %s: %w", last.ID, err)
	}
	o.To = lv.From
	o.baseBackup = last.Value("backup")
	p, err := build(ctx, c, st, plan.KindRollback, from, lv.From, o, mixed)
	if err != nil {
		return nil, nil, fmt.Errorf("roll back %s: %w", last.ID, err)
	}
	p.Of = last.ID
	return p, last, nil
}

func lastUpgrade(store *plan.Store) (*plan.Plan, error) {
	ps, err := store.List()
	if err != nil {
		return nil, err
	}
	var last *plan.Plan
	for _, p := range ps {
		if p.Kind == plan.KindUpgrade && p.State != plan.RolledBack && (last == nil || p.CreatedAt.After(last.CreatedAt)) {
			last = p
		}
	}
	if last == nil {
		return nil, ErrNoUpgrade
	}
	return last, nil
}

// rollbackStart is the version a rollback starts from. With mixed
// versions (an upgrade stopped halfway), members ahead of the cluster
// version have written nothing the older binary cannot read (the cluster
// version did not advance), so the rollback treats the cluster as being on
// the older version: swapping those members back is the first hop.
func rollbackStart(c *cluster.Cluster, st *status.Status) (string, bool, error) {
	v, err := uniformVersion(c, st)
	if err == nil {
		return v, false, nil
	}
	// Mixed: start from the newest version run on the cluster version's
	// minor line.
	cv, cerr := semver.NewVersion(st.Cluster.Version)
	if cerr != nil {
		return "", false, err
	}
	var best *semver.Version
	for _, m := range st.Members {
		mv, e := semver.NewVersion(m.Version)
		if e == nil && mv.Major == cv.Major && mv.Minor == cv.Minor && (best == nil || best.LessThan(*mv)) {
			best = mv
		}
	}
	if best == nil {
		return "", false, err
	}
	return best.String(), true, nil
}

func minorOf(v string) string {
	sv, err := semver.NewVersion(v)
	if err != nil {
		return v
	}
	return catalogue.MinorOf(sv)
}
