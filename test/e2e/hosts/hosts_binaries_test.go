package hosts_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/binpush"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
)

// TestHostsBinaries: binaries reach every host from the coordinator. Three
// hosts whose agents run on their own, empty, stores get etcd 3.6.16 by
// `steward binaries push` before `up`, and their members run that copy;
// the upgrade pre-flight to 3.7.3 (`upgrade apply`: `upgrade plan` runs no
// checks) names every host lacking 3.7.3 and leaves no plan; `binaries
// import` on the coordinator pushes 3.7.3 to the hosts that answer and
// exits non-zero naming the one cut off (the local import stays), and the
// pre-flight names only that host; after the heal, `binaries push --host`
// completes it, the pre-flight passes and the upgrade runs every member on
// its host's pushed copy.
//
// Binaries in step: status shows (JSON agents[].binaries, condition
// BinariesInStep, a table line per host) every host lacking the versions of
// the coordinator's store; another build of 3.7.3 imported on h2 is shown
// as different and named by the pre-flight with `binaries push 3.7.3 --host
// h2 --force`, which a plain push refuses and the forced one fixes (h2's
// copy kept aside); after the pushes status shows every host in step.
func TestHostsBinaries(t *testing.T) {
	t.Parallel()
	hs := harness.NewHosts(t, 3)
	for _, h := range hs.Hosts {
		h.OwnStore = true
	}
	hs.Init("3.6.16")
	hs.StartAgents()
	hostStore := func(h *harness.AgentHost) string { return filepath.Join(h.Dir, "binaries") }

	t.Run("push before up", func(t *testing.T) {
		e := hs.Env.For(t)
		so, se, err := e.Run("binaries", "push", "3.6.16", "-o", "json")
		if err != nil {
			t.Fatalf("binaries push 3.6.16: %v\nstdout: %s\nstderr: %s", err, so, se)
		}
		t.Logf("push:\n%s", se)
		if !strings.Contains(se, "pushing etcd 3.6.16 from "+hs.Store+" to 3 host(s): h1, h2, h3") {
			t.Errorf("no opening progress line: %s", se)
		}
		res := pushResult(t, so)
		if len(res.Hosts) != len(hs.Hosts) {
			t.Fatalf("push result %+v, want every host", res)
		}
		for i, h := range hs.Hosts {
			bin := filepath.Join(hostStore(h), "etcd-v3.6.16", "etcd")
			if !strings.Contains(se, fmt.Sprintf("host %s (%s): etcd 3.6.16 installed and verified (etcd, etcdctl, etcdutl)", h.Name, h.Addr)) {
				t.Errorf("no progress line for host %s: %s", h.Name, se)
			}
			if got := res.Hosts[i]; got.Host != h.Name || got.Address != h.Addr || got.Result != binpush.PushInstalled || got.Binary != bin {
				t.Errorf("host %s: %+v, want installed as %s", h.Name, got, bin)
			}
			// The host's copy verifies, and is the coordinator's.
			e.MustRun("binaries", "verify", "3.6.16", "--store", hostStore(h))
			requireSameFiles(t, filepath.Join(hs.Store, "etcd-v3.6.16"), filepath.Join(hostStore(h), "etcd-v3.6.16"))
		}

		// Again: every host already has it, and nothing is sent.
		for _, h := range pushResult(t, e.MustRun("binaries", "push", "3.6.16", "-o", "json")).Hosts {
			if h.Result != binpush.PushPresent || h.Binary != filepath.Join(hostStore(hs.Host(h.Host)), "etcd-v3.6.16", "etcd") {
				t.Errorf("second push: %+v, want present", h)
			}
		}
	})
	if t.Failed() {
		return
	}

	t.Run("members run the pushed binary", func(t *testing.T) {
		e := hs.Env.For(t)
		if out := e.MustRun("up"); !strings.Contains(out, "is healthy: 3 members") {
			t.Fatalf("up: %s", out)
		}
		st := e.WaitStatus(time.Minute, "three healthy members", harness.Healthy)
		requireMembersRun(t, hs, st, "3.6.16")

		// The coordinator's store (the test store) holds 3.5.35 and 3.7.3
		// too: status shows every host lacking them.
		requireBinaries(t, e, map[string]cluster.HostBinaries{
			"h1": {State: cluster.BinariesDiffer, StoreDiff: binaries.StoreDiff{Lacking: []string{"3.5.35", "3.7.3"}}},
			"h2": {State: cluster.BinariesDiffer, StoreDiff: binaries.StoreDiff{Lacking: []string{"3.5.35", "3.7.3"}}},
			"h3": {State: cluster.BinariesDiffer, StoreDiff: binaries.StoreDiff{Lacking: []string{"3.5.35", "3.7.3"}}},
		})
	})
	if t.Failed() {
		return
	}

	t.Run("pre-flight names the hosts lacking the version", func(t *testing.T) {
		e := hs.Env.For(t)
		se := e.MustFail("upgrade", "apply", "--to", "3.7.3")
		t.Logf("refusal: %s", se)
		if !strings.Contains(se, "pre-flight checks failed; nothing was changed") {
			t.Errorf("want the pre-flight refusal: %s", se)
		}
		if _, err := harness.ReadPlan(e); err == nil {
			t.Errorf("a refused upgrade left a plan")
		}
		for _, h := range hs.Hosts {
			// The host's problem as the library words it, with the
			// command the coordinator's command adds (from its kind).
			if !strings.Contains(se, fmt.Sprintf("host %s: etcd 3.7.3 is not in the binary store %s and is not the embedded version %s: import it with \"steward binaries import\": etcd version not found",
				h.Name, hostStore(h), binaries.EmbeddedVersion())) {
				t.Errorf("pre-flight does not name host %s: %s", h.Name, se)
			}
		}
		if !strings.Contains(se, "binaries: ") || !strings.Contains(se, "`steward binaries push 3.7.3 --host h1 --host h2 --host h3`") {
			t.Errorf("the binaries check does not say how to push: %s", se)
		}
	})
	if t.Failed() {
		return
	}

	// The coordinator imports 3.7.3 (into a store of its own here: the
	// test store is shared) while h3 is cut off.
	local := t.TempDir()
	h3 := hs.Host("h3")
	t.Run("import pushes to the hosts that answer", func(t *testing.T) {
		e := hs.Env.For(t)
		h3.Cut(t)
		so, se, err := e.Run("binaries", "import", "--store", local, filepath.Join(hs.Store, "etcd-v3.7.3"), "-o", "json")
		h3.Heal(t)
		t.Logf("import:\n%s", se)
		if err == nil {
			t.Fatalf("import with h3 cut off succeeded: %s %s", so, se)
		}
		for _, want := range []string{
			"etcd 3.7.3 is in the binary store " + local + ", but: the version did not reach every host: etcd 3.7.3 is not on 1 of 3 host(s): h3 (" + h3.Addr + "): agent h3 on host " + h3.Addr + " unreachable at https://" + h3.Addr + ":2378",
			"once they answer, run `steward binaries push 3.7.3 --store " + local + " --host h3`",
			fmt.Sprintf("host h3 (%s): etcd 3.7.3 not pushed: agent h3 on host %s unreachable", h3.Addr, h3.Addr),
			// What to check, added by the command after the unreachable
			// agent: in its progress line and in the error.
			"; check that `steward agent` runs there and that this machine reaches that address\n",
			"; check that `steward agent` runs there and that this machine reaches that address; once they answer",
		} {
			if !strings.Contains(se, want) {
				t.Errorf("stderr lacks %q:\n%s", want, se)
			}
		}
		var out struct {
			Version string              `json:"version"`
			Path    string              `json:"path"`
			Push    *binpush.PushResult `json:"push"`
		}
		if err := json.Unmarshal([]byte(so), &out); err != nil || out.Push == nil || len(out.Push.Hosts) != 3 {
			t.Fatalf("import output %q: %+v, %v", so, out, err)
		}
		if out.Version != "3.7.3" || out.Path != filepath.Join(local, "etcd-v3.7.3", "etcd") || out.Push.Store != local {
			t.Errorf("import output: %+v", out)
		}
		for i, h := range hs.Hosts {
			got, want := out.Push.Hosts[i], binpush.PushInstalled
			if h == h3 {
				want = binpush.PushFailed
			}
			if got.Host != h.Name || got.Result != want {
				t.Errorf("host %s: %+v, want %s", h.Name, got, want)
			}
			if h == h3 && !strings.HasSuffix(got.Error, "; check that `steward agent` runs there and that this machine reaches that address") {
				t.Errorf("host %s: error %q, want what to check after it", h.Name, got.Error)
			}
			if h != h3 {
				e.MustRun("binaries", "verify", "3.7.3", "--store", hostStore(h))
			}
		}
		// The local import stays; h3 got nothing, not even a temporary
		// directory.
		e.MustRun("binaries", "verify", "3.7.3", "--store", local)
		if _, err := os.Stat(filepath.Join(hostStore(h3), "etcd-v3.7.3")); !os.IsNotExist(err) {
			t.Errorf("h3 has 3.7.3: %v", err)
		}
		if left, _ := filepath.Glob(filepath.Join(hostStore(h3), ".import-*")); len(left) > 0 {
			t.Errorf("h3 has temporary directories: %v", left)
		}
		e.WaitStatus(time.Minute, "h3's member back", harness.Healthy)

		// h2's operator imports another build of 3.7.3 over the pushed
		// one (the same release with a byte more: etcd --version still
		// says 3.7.3, its SHA-256 differs): the host's manifest records
		// the other sum, as after any import of another build.
		other := filepath.Join(t.TempDir(), "etcd-v3.7.3")
		if err := os.Mkdir(other, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, tool := range []string{"etcd", "etcdctl", "etcdutl"} {
			b, err := os.ReadFile(filepath.Join(hs.Store, "etcd-v3.7.3", tool))
			if err != nil {
				t.Fatal(err)
			}
			if tool == "etcd" {
				b = append(b, 0)
			}
			if err := os.WriteFile(filepath.Join(other, tool), b, 0o700); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := binaries.Open(hostStore(hs.Host("h2"))).Import(t.Context(), other, binaries.ImportOptions{Force: true}); err != nil {
			t.Fatal(err)
		}

		requireBinaries(t, e, map[string]cluster.HostBinaries{
			"h1": {State: cluster.BinariesDiffer, StoreDiff: binaries.StoreDiff{Lacking: []string{"3.5.35"}}},
			"h2": {State: cluster.BinariesDiffer, StoreDiff: binaries.StoreDiff{Lacking: []string{"3.5.35"}, Different: []string{"3.7.3"}}},
			"h3": {State: cluster.BinariesDiffer, StoreDiff: binaries.StoreDiff{Lacking: []string{"3.5.35", "3.7.3"}}},
		})

		se = e.MustFail("upgrade", "apply", "--to", "3.7.3")
		t.Logf("refusal: %s", se)
		if !strings.Contains(se, "host h3: etcd 3.7.3 is not in the binary store") || strings.Contains(se, "host h1:") ||
			!strings.Contains(se, "`steward binaries push 3.7.3 --host h3`") {
			t.Errorf("pre-flight after the partial push, want h3 named lacking 3.7.3: %s", se)
		}
		if !strings.Contains(se, "host h2: etcd 3.7.3 in the binary store "+hostStore(hs.Host("h2"))+" is another build than this machine's") ||
			!strings.Contains(se, "`steward binaries push 3.7.3 --host h2 --force`") {
			t.Errorf("pre-flight does not name h2's other build and its push: %s", se)
		}
	})
	if t.Failed() {
		return
	}

	t.Run("push to the missing host, and the upgrade runs it", func(t *testing.T) {
		e := hs.Env.For(t)
		so, se, err := e.Run("binaries", "push", "3.7.3", "--host", "h3", "-o", "json")
		if err != nil {
			t.Fatalf("binaries push 3.7.3 --host h3: %v\nstdout: %s\nstderr: %s", err, so, se)
		}
		res := pushResult(t, so)
		if !strings.Contains(se, "to 1 host(s): h3") || len(res.Hosts) != 1 || res.Hosts[0].Host != "h3" || res.Hosts[0].Result != binpush.PushInstalled {
			t.Errorf("push to h3 only: %+v\nstderr: %s", res, se)
		}
		requireSameFiles(t, filepath.Join(local, "etcd-v3.7.3"), filepath.Join(hostStore(h3), "etcd-v3.7.3"))

		// h2 holds another build: a plain push is refused and says how
		// to replace it; the forced one keeps h2's copy aside.
		h2 := hs.Host("h2")
		se = e.MustFail("binaries", "push", "3.7.3", "--host", "h2")
		if !strings.Contains(se, "a different etcd binary is stored under this version") || !strings.Contains(se, "`steward binaries push 3.7.3 --host h2 --force`") {
			t.Errorf("plain push over another build: %s", se)
		}
		if res := pushResult(t, e.MustRun("binaries", "push", "3.7.3", "--host", "h2", "--force", "-o", "json")); len(res.Hosts) != 1 || res.Hosts[0].Result != binpush.PushInstalled {
			t.Errorf("forced push to h2: %+v", res)
		}
		requireSameFiles(t, filepath.Join(hs.Store, "etcd-v3.7.3"), filepath.Join(hostStore(h2), "etcd-v3.7.3"))
		// Two copies aside: the pushed one the operator's import replaced,
		// then the other build the forced push replaced (the newest).
		aside, _ := filepath.Glob(filepath.Join(hostStore(h2), "etcd-v3.7.3.replaced-*"))
		sort.Strings(aside)
		if len(aside) != 2 {
			t.Errorf("h2's copies kept aside: %v, want 2", aside)
		} else if b, err := os.ReadFile(filepath.Join(aside[1], "etcd")); err != nil || len(b) == 0 || b[len(b)-1] != 0 {
			t.Errorf("the newest copy aside %s is not h2's other build (%v)", aside[1], err)
		}
		// And 3.5.35 everywhere: status is clean.
		e.MustRun("binaries", "push", "3.5.35")
		requireBinaries(t, e, map[string]cluster.HostBinaries{
			"h1": {State: cluster.BinariesInStep}, "h2": {State: cluster.BinariesInStep}, "h3": {State: cluster.BinariesInStep},
		})

		e.MustRun("upgrade", "apply", "--to", "3.7.3")
		st := e.WaitStatus(time.Minute, "every member on 3.7.3", harness.Healthy)
		harness.RequireVersion(t, st, "3.7.3", "after the upgrade")
		requireMembersRun(t, hs, st, "3.7.3")
	})
}

// requireMembersRun fails unless every member runs etcd version from its
// host's own store, as its agent says and as its process shows.
func requireMembersRun(t *testing.T, hs *harness.Hosts, st *status.Status, version string) {
	t.Helper()
	c, err := cluster.Open(hs.Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range st.Members {
		h := hs.Host(m.Agent)
		want := filepath.Join(h.Dir, "binaries", "etcd-v"+version, "etcd")
		ac, err := c.Agent(m.Agent)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := ac.Member(t.Context(), m.Name)
		if err != nil || ms.Binary != want {
			t.Errorf("member %s: agent says binary %q (%v), want %s", m.Name, ms.Binary, err, want)
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", ms.PID)); err != nil || exe != want {
			t.Errorf("member %s (pid %d) runs %q (%v), want %s", m.Name, ms.PID, exe, err, want)
		}
	}
}

// requireBinaries fails unless status (JSON) compares every host's binary
// store as want says, the BinariesInStep condition agrees, and the table
// has a line for each host that differs, and none for one in step.
func requireBinaries(t *testing.T, e *harness.Env, want map[string]cluster.HostBinaries) {
	t.Helper()
	st := e.Status()
	inStep := true
	for _, a := range st.Agents {
		w, ok := want[a.Name]
		if !ok {
			continue
		}
		inStep = inStep && w.State == cluster.BinariesInStep
		if a.Binaries == nil || !reflect.DeepEqual(*a.Binaries, w) {
			t.Errorf("status: host %s binaries %+v, want %+v", a.Name, a.Binaries, w)
		}
	}
	cond := harness.Cond(st, status.CondBinariesInStep)
	if wantStatus := map[bool]string{true: "True", false: "False"}[inStep]; cond.Status != wantStatus {
		t.Errorf("condition %s: %+v, want %s", status.CondBinariesInStep, cond, wantStatus)
	}
	table := e.MustRun("status")
	for name, w := range want {
		line := ""
		if w.State != cluster.BinariesInStep {
			line = name + " " + w.State + " " + w.Summary()
		}
		found := false
		for _, l := range strings.Split(table, "\n") {
			if strings.Join(strings.Fields(l), " ") == line {
				found = true
			}
			if f := strings.Fields(l); line == "" && len(f) > 1 && f[0] == name && (f[1] == cluster.BinariesDiffer || f[1] == cluster.BinariesUnknown) {
				t.Errorf("status table has a binaries line for %s, in step: %q", name, l)
			}
		}
		if line != "" && !found {
			t.Errorf("status table has no line %q:\n%s", line, table)
		}
	}
	if t.Failed() {
		t.Logf("status:\n%s", table)
	}
}

// pushResult decodes the JSON output of `binaries push`.
func pushResult(t *testing.T, out string) binpush.PushResult {
	t.Helper()
	var res binpush.PushResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("push output %q: %v", out, err)
	}
	return res
}

// requireSameFiles fails unless dir b holds the tools of dir a, byte for
// byte.
func requireSameFiles(t *testing.T, a, b string) {
	t.Helper()
	for _, tool := range []string{"etcd", "etcdctl", "etcdutl"} {
		x, err := os.ReadFile(filepath.Join(a, tool))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, tool))
		if err != nil || string(x) != string(y) {
			t.Errorf("%s: %s differs from %s (%v)", tool, filepath.Join(b, tool), filepath.Join(a, tool), err)
		}
	}
}
