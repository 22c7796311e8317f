package core_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/maintenance"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestMaintenance moves the leader, defragments a cluster (followers first,
// leader last; refused while a member is down), and clears a NOSPACE alarm.
func TestMaintenance(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.WriteSpec(3, binaries.EmbeddedVersion(), func(s *spec.Cluster) {
		s.Etcd.QuotaBackendBytes = 8 << 20
	})
	e.MustRun("up")
	st := e.Status()

	// Leader move.
	var follower string
	for _, m := range st.Members {
		if m.Role == "follower" {
			follower = m.Name
		}
	}
	e.MustRun("leader", "move", "--to", follower)
	if got := e.Status().Cluster.Leader; got != follower {
		t.Fatalf("leader after move: %s, want %s", got, follower)
	}
	if out := e.MustFail("leader", "move", "--to", "nobody"); !strings.Contains(out, `no member named "nobody"`) {
		t.Errorf("move to unknown member: %s", out)
	}

	// Fill, delete and compact so defragmentation has something to free.
	ctx := t.Context()
	cli := e.Client()
	big := strings.Repeat("x", 64<<10)
	var rev int64
	for i := 0; i < 60; i++ {
		r, err := cli.Put(ctx, "defrag/key", big)
		if err != nil {
			t.Fatal(err)
		}
		rev = r.Header.Revision
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	out := e.MustRun("defrag", "-o", "json")
	var res []maintenance.DefragResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("defrag output: %v\n%s", err, out)
	}
	if len(res) != 3 || res[2].Member != follower {
		t.Fatalf("defrag order %+v: want 3 members with the leader %s last", res, follower)
	}
	for _, r := range res {
		if r.DBSizeTo >= r.DBSizeFrom {
			t.Errorf("defrag of %s did not shrink the database: %d -> %d", r.Member, r.DBSizeFrom, r.DBSizeTo)
		}
	}

	// Defragmentation refuses while a member is down, and says which.
	down := e.Spec().Members[0].Name
	e.MustRun("member", "stop", down)
	e.WaitStatus(30*time.Second, "member stopped", func(st *status.Status) bool { m, _ := st.Member(down); return !m.Healthy })
	if out := e.MustFail("defrag"); !strings.Contains(out, "refusing to defragment while member "+down+" is unhealthy") {
		t.Errorf("defrag with a member down: %s", out)
	}

	e.MustRun("member", "start", down)
	e.WaitStatus(60*time.Second, "healthy again", harness.Healthy)

	// Another member answering on a member's client URL (issue 13, finding
	// 6: an alias, a port reused): the spec puts a follower on a port that
	// forwards to another member. Nothing takes that answer for the
	// follower's: status names who answers, leader move to the follower and
	// defragmentation refuse.
	st = e.Status()
	var target, other status.MemberStatus
	for _, m := range st.Members {
		switch {
		case target.Name == "" && m.Role == "follower":
			target = m
		case other.Name == "":
			other = m
		}
	}
	if target.Name == "" || other.Name == "" {
		t.Fatalf("no follower and other member in %+v", st.Members)
	}
	fwd, stopForward := forward(t, "127.0.0.1:0", strings.TrimPrefix(other.ClientURLs[0], "https://"))
	specPath := filepath.Join(e.Dir, spec.FileName)
	orig, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	aliased := e.Spec()
	m, _ := aliased.Member(target.Name)
	m.ClientURL = "https://" + fwd
	if err := aliased.Save(specPath); err != nil {
		t.Fatal(err)
	}
	wrong := other.Name + " (ID " + other.ID + ") answers on https://" + fwd + ", not " + target.Name
	alias := e.WaitStatus(30*time.Second, other.Name+" answering on "+target.Name+"'s URL", func(st *status.Status) bool {
		m, _ := st.Member(target.Name)
		return strings.Contains(m.LastError, wrong)
	})
	if m, _ := alias.Member(target.Name); m.Healthy {
		t.Errorf("%s counted healthy while %s answers on its URL", target.Name, other.Name)
	}
	if out := e.MustFail("leader", "move", "--to", target.Name); !strings.Contains(out, "cannot move leadership to "+target.Name) || !strings.Contains(out, wrong) {
		t.Errorf("leader move to a member another answers for: %s", out)
	}
	if out := e.MustFail("defrag"); !strings.Contains(out, "refusing to defragment while member "+target.Name+" is unhealthy") || !strings.Contains(out, wrong) {
		t.Errorf("defrag while another member answers on %s's URL: %s", target.Name, out)
	}
	if err := os.WriteFile(specPath, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	stopForward()
	if got := e.WaitStatus(30*time.Second, "healthy with the spec restored", harness.Healthy).Cluster.Leader; got == target.Name {
		t.Errorf("leadership moved to %s while another member answered for it", target.Name)
	}

	// NOSPACE: fill past the quota, then disarm (compact, defrag, disarm).
	var nospace bool
	for i := 0; i < 400 && !nospace; i++ {
		_, err := cli.Put(ctx, "fill/key", big)
		if errors.Is(err, rpctypes.ErrNoSpace) {
			nospace = true
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if !nospace {
		t.Fatal("no NOSPACE alarm after writing 25 MB into an 8 MiB quota")
	}
	var alarms []maintenance.Alarm
	if err := json.Unmarshal([]byte(e.MustRun("alarm", "list", "-o", "json")), &alarms); err != nil {
		t.Fatal(err)
	}
	if len(alarms) == 0 || alarms[0].Alarm != "NOSPACE" {
		t.Fatalf("alarm list: %+v, want NOSPACE", alarms)
	}
	if c := harness.Cond(e.Status(), status.CondAllMembersReady); c.Status != "False" || !strings.Contains(c.Message, "NOSPACE") {
		t.Errorf("AllMembersReady with NOSPACE raised: %+v", c)
	}
	e.MustRun("alarm", "disarm")
	if err := json.Unmarshal([]byte(e.MustRun("alarm", "list", "-o", "json")), &alarms); err != nil {
		t.Fatal(err)
	}
	if len(alarms) != 0 {
		t.Fatalf("alarms after disarm: %+v", alarms)
	}
	if _, err := cli.Put(ctx, "after/nospace", "ok"); err != nil {
		t.Fatalf("write after disarm: %v", err)
	}
	e.WaitStatus(30*time.Second, "healthy after disarm", harness.Healthy)
}
