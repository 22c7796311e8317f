package hosts_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/workload"
)

// TestHostsCertRenewal renews the certificates of a three-host cluster
// from the coordinator (`steward certs renew --all`, twice) under the
// acknowledged writer: each host's server, peer, agent and client
// certificates are reissued with the keys the hosts keep and installed by
// their agents; every member's client and peer port and every agent then
// presents the new serial in a live handshake from the coordinator, the
// hosts' key files are unchanged and no .prev is left, no member restarts
// and no write fails. Then, with a follower's host cut off, a renewal
// renews the other hosts and reports the cut one (exit 1).
func TestHostsCertRenewal(t *testing.T) {
	t.Parallel()
	hs := harness.NewHosts(t, 3)
	hs.Init("3.6.16")
	hs.StartAgents()
	hs.MustRun("up")
	st := hs.WaitStatus(time.Minute, "three healthy members on three hosts", harness.Healthy)
	pids := map[string]int{}
	for _, m := range st.Members {
		pids[m.Name] = m.PID
	}
	keys := map[string][]byte{} // host/name -> key file
	for _, h := range hs.Hosts {
		for _, n := range pki.HostLeafNames {
			b, err := os.ReadFile(filepath.Join(h.Dir, "pki", n+".key"))
			if err != nil {
				t.Fatal(err)
			}
			keys[h.Name+"/"+n] = b
		}
	}
	cli := hs.Client()
	defer cli.Close()
	w := harness.UnderWrites(t, cli, workload.Options{Prefix: "hostcerts", Interval: 5 * time.Millisecond, Attempts: 20, Timeout: 3 * time.Second}, harness.Expect{Acked: 50, Within: 20 * time.Second, NoFailed: true})

	renew := func(t *testing.T, out string) map[string]pki.Renewal {
		var rs []pki.Renewal
		if err := json.Unmarshal([]byte(out), &rs); err != nil {
			t.Fatalf("parse certs renew: %v\n%s", err, out)
		}
		m := map[string]pki.Renewal{}
		for _, r := range rs {
			m[r.Host+"/"+r.Name] = r
		}
		return m
	}
	for _, round := range []string{"first", "second"} {
		t.Run(round, func(t *testing.T) {
			e := hs.Env.For(t)
			before := harness.CertsList(e)
			rs := renew(t, e.MustRun("certs", "renew", "--all", "-o", "json"))
			after := harness.CertsList(e)
			for _, h := range hs.Hosts {
				for _, n := range pki.HostLeafNames {
					r, ok := rs[h.Name+"/"+n]
					if !ok || r.NewSerial == r.OldSerial {
						t.Errorf("host %s %s not renewed: %+v", h.Name, n, r)
						continue
					}
					if r.File != filepath.Join(h.Dir, "pki", n+".crt") {
						t.Errorf("host %s %s: file %s", h.Name, n, r.File)
					}
					if k, _ := os.ReadFile(filepath.Join(h.Dir, "pki", n+".key")); string(k) != string(keys[h.Name+"/"+n]) {
						t.Errorf("host %s: %s.key changed", h.Name, n)
					}
					if prev, _ := filepath.Glob(filepath.Join(h.Dir, "pki", "*"+pki.PrevSuffix)); len(prev) > 0 {
						t.Errorf("host %s: previous certificates left: %v", h.Name, prev)
					}
				}
				if a := after["agent "+h.Name]; a.Serial != rs[h.Name+"/agent"].NewSerial || a.Error != "" || a.Serial == before["agent "+h.Name].Serial {
					t.Errorf("agent %s serves %+v, want serial %s", h.Name, a, rs[h.Name+"/agent"].NewSerial)
				}
			}
			for _, m := range st.Members {
				for port, leaf := range map[string]string{"client": "server", "peer": "peer"} {
					name := "member " + m.Name + " " + port
					if a, want := after[name], rs[m.Agent+"/"+leaf].NewSerial; a.Serial != want || a.Error != "" || a.Serial == before[name].Serial {
						t.Errorf("%s serves %+v, want serial %s (was %s)", name, a, want, before[name].Serial)
					}
				}
			}
		})
	}

	t.Run("a host cut off", func(t *testing.T) {
		e := hs.Env.For(t)
		var victim *harness.AgentHost
		for _, m := range e.Status().Members {
			if m.Role == "follower" {
				victim = hs.Host(m.Agent)
				break
			}
		}
		victim.Cut(t)
		so, se, err := e.Run("certs", "renew", "--all", "-o", "json")
		victim.Heal(t)
		if err == nil || !strings.Contains(se, "host "+victim.Name+":") || !strings.Contains(se, "unreachable") {
			t.Fatalf("renew with %s cut off: %v, stderr %s; want exit 1 naming the host", victim.Name, err, se)
		}
		rs := renew(t, so)
		for _, h := range hs.Hosts {
			_, ok := rs[h.Name+"/server"]
			if want := h != victim; ok != want {
				t.Errorf("host %s renewed: %v, want %v", h.Name, ok, want)
			}
		}
		if _, ok := rs["/client"]; !ok {
			t.Errorf("the coordinator's own client certificate not renewed: %v", slices.Collect(maps.Keys(rs)))
		}
	})

	// The writer retries what the cut host held up: it must go on once the
	// host is back before it stops, so no write is cut short by Stop.
	st = hs.WaitStatus(time.Minute, "healthy after the renewals", harness.Healthy)
	harness.Eventually(t, 30*time.Second, 50*time.Millisecond, "writes acknowledged after the heal", w.AckedAbove(w.Acked()+50))
	w.Finish(t)
	for _, m := range st.Members {
		if m.PID != pids[m.Name] {
			t.Errorf("member %s restarted (pid %d, was %d)", m.Name, m.PID, pids[m.Name])
		}
	}
	if c := harness.Cond(st, status.CondCertificatesReady); c.Status != "True" {
		t.Errorf("CertificatesReady after the renewals: %+v", c)
	}
}
