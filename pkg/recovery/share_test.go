package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// fakeHosts keeps each host's counts as its agent does
// (recoverycount.Merge); a host in cut refuses every push.
type fakeHosts struct {
	mu   sync.Mutex
	kept map[string][]recoverycount.Counts // guarded by mu
	cut  map[string]bool                   // guarded by mu
	sent map[string]int                    // guarded by mu: pushes that arrived, per host
}

func (f *fakeHosts) send(_ context.Context, _ *cluster.Cluster, a spec.Agent, rc recoverycount.Counts) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut[a.Name] {
		return errors.New("connection refused")
	}
	f.sent[a.Name]++
	out, _, err := recoverycount.Merge(f.kept[a.Name], rc)
	if err != nil {
		return err
	}
	f.kept[a.Name] = out
	return nil
}

// TestSharerReachesEveryHost: the counts reach every host's agent, and
// each ends with the newest counts, once each action: a host cut off when
// an action is counted gets the counts once it answers again (pushed at
// each round until it acknowledges), a host that acknowledged them is not
// asked again until the counts change or resendAfter passes, a restarted
// coordinator (a new sharer) pushes to every host once and changes no
// count, and a host removed from the spec is forgotten.
func TestSharerReachesEveryHost(t *testing.T) {
	hosts := hostset.Hosts{{Name: "h1", Host: "10.0.0.1"}, {Name: "h2", Host: "10.0.0.2"}, {Name: "h3", Host: "10.0.0.3"}}
	f := &fakeHosts{kept: map[string][]recoverycount.Counts{}, cut: map[string]bool{}, sent: map[string]int{}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newSh := func() *sharer {
		s := newSharer(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		s.send, s.now = f.send, func() time.Time { return now }
		return s
	}
	sh := newSh()
	c := &cluster.Cluster{}
	st := &status.AutoRecoveryState{Recorder: "00000000000000aa"}
	round := func(sh *sharer) {
		rc, ok := st.Counts()
		if !ok {
			t.Fatal("no counts")
		}
		sh.push(t.Context(), c, hosts, rc)
	}
	want := func(what string, hs ...string) {
		t.Helper()
		rc, _ := st.Counts()
		exp := fmt.Sprint([]recoverycount.Counts{{Recorder: rc.Recorder, Actions: rc.Actions}})
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, h := range hs {
			if got := fmt.Sprint(f.kept[h]); got != exp {
				t.Errorf("%s: host %s keeps %s, want %s", what, h, got, exp)
			}
		}
	}
	sent := func() map[string]int {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := map[string]int{}
		for k, v := range f.sent {
			out[k] = v
		}
		return out
	}

	round(sh) // no count yet: every host learns the recorder
	want("first round", "h1", "h2", "h3")
	st.CountAction("reseed", status.ReasonQuorumLost, "success")
	f.cut["h3"] = true
	round(sh)
	want("an action counted, h3 cut off", "h1", "h2")
	before := sent()
	for range 3 {
		round(sh)
	}
	if s := sent(); s["h1"] != before["h1"] || s["h2"] != before["h2"] {
		t.Errorf("hosts that acknowledged were pushed again: %v, were %v", s, before)
	}
	if len(sh.due(hosts.Names(), mustKey(t, st), now)) != 1 {
		t.Errorf("due with h3 cut off: %v, want h3", sh.due(hosts.Names(), mustKey(t, st), now))
	}
	f.cut["h3"] = false
	round(sh)
	want("h3 healed", "h1", "h2", "h3")
	if d := sh.due(hosts.Names(), mustKey(t, st), now); len(d) != 0 {
		t.Errorf("due after every host acknowledged: %v", d)
	}
	now = now.Add(resendAfter)
	if d := sh.due(hosts.Names(), mustKey(t, st), now); len(d) != 3 {
		t.Errorf("due after resendAfter: %v, want every host", d)
	}
	round(sh)

	// A new count reaches every host; a restarted coordinator pushes the
	// same counts once more to each, and no host counts anything twice.
	st.CountAction("restore", status.ReasonQuorumLost, "failure")
	round(sh)
	sh2 := newSh()
	round(sh2)
	round(sh2)
	want("after a restart", "h1", "h2", "h3")
	f.mu.Lock()
	for _, h := range []string{"h1", "h2", "h3"} {
		for _, a := range f.kept[h][0].Actions {
			if a.Count != 1 {
				t.Errorf("host %s counts %+v, want 1", h, a)
			}
		}
	}
	f.mu.Unlock()

	// h3 leaves the spec: forgotten.
	sh2.due(hosts[:2].Names(), mustKey(t, st), now)
	if _, ok := sh2.delivered["h3"]; ok {
		t.Errorf("a host no longer in the spec is remembered")
	}
}

func mustKey(t *testing.T, st *status.AutoRecoveryState) string {
	t.Helper()
	rc, _ := st.Counts()
	b, err := json.Marshal(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
