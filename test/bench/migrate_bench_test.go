package bench

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/etcd-steward/steward/pkg/kmigrate"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/test/harness"
)

// BenchmarkMigrateConfigMaps: storage migration of
// STEWARD_BENCH_MIGRATE_OBJECTS (default 100,000) config maps (about 600
// bytes of data each, in 100 namespaces) through one kube-apiserver on a
// one-member Steward cluster, every update a real write: before each
// migration the API server restarts with a new encryption key first in
// its encryption configuration, so that every stored object is stale.
//
//   - Steward (`steward migrate storage --resources configmaps --qps 0
//     --workers W`, W from STEWARD_BENCH_MIGRATE_WORKERS, default 32):
//     objects/s and peak memory (max RSS of the process), first on a tenth
//     of the objects, then on all of them: the memory must not grow with
//     the number of objects;
//   - the documented method in the same run: `kubectl get configmaps -A
//     -o json | kubectl replace -f -` (objects/s and the two kubectl
//     processes' max RSS); STEWARD_BENCH_MIGRATE_BASELINE=0 skips it;
//   - the inventory of a snapshot of the same cluster afterwards (`steward
//     inspect storage-versions --snapshot`): objects/s.
//
// Where the time goes: for each migration, the CPU time of Steward,
// kube-apiserver and etcd per object (from /proc, the processes' user +
// system time during the run). STEWARD_BENCH_MIGRATE_PROFILE=DIR also
// writes Go CPU profiles of the full-size migration: Steward's whole run
// (DIR/steward.pprof, the hidden --cpu-profile flag) and kube-apiserver's
// first STEWARD_BENCH_MIGRATE_PROFILE_SECONDS (default 10) seconds of it
// (DIR/kube-apiserver.pprof, from its /debug/pprof).
func BenchmarkMigrateConfigMaps(b *testing.B) {
	n := envInt("STEWARD_BENCH_MIGRATE_OBJECTS", 100_000)
	workers := envInt("STEWARD_BENCH_MIGRATE_WORKERS", 32)
	// STEWARD_BENCH_MIGRATE_JSON=1: Steward in JSON (--protobuf=false).
	useJSON := os.Getenv("STEWARD_BENCH_MIGRATE_JSON") == "1"
	prof := profileOpts{dir: os.Getenv("STEWARD_BENCH_MIGRATE_PROFILE"), seconds: envInt("STEWARD_BENCH_MIGRATE_PROFILE_SECONDS", 10)}
	baseline := os.Getenv("STEWARD_BENCH_MIGRATE_BASELINE") != "0"
	kubectl, err := exec.LookPath("kubectl")
	if baseline && err != nil {
		b.Fatalf("kubectl (the baseline) is not installed: %v; STEWARD_BENCH_MIGRATE_BASELINE=0 skips it", err)
	}
	for i := 0; i < b.N; i++ {
		e := bigOneMember(b)
		k := e.StartKubeAPIServer()
		cfg := k.RESTConfig()
		cfg.QPS, cfg.Burst = 5000, 10000
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			b.Fatal(err)
		}
		ctx := b.Context()
		for ns := 0; ns < 100; ns++ {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%03d", ns)}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}

		// Encryption configurations: each migration is preceded by a restart
		// with a new key first; the older keys stay to read what they wrote.
		var keys []string
		rotate := func(identityFirst bool) {
			kb := make([]byte, 32)
			if _, err := rand.Read(kb); err != nil {
				b.Fatal(err)
			}
			keys = append([]string{fmt.Sprintf("      - name: key%d\n        secret: %s\n", len(keys)+1, base64.StdEncoding.EncodeToString(kb))}, keys...)
			providers := "  - aescbc:\n      keys:\n" + strings.Join(keys, "") + "  - identity: {}\n"
			if identityFirst {
				providers = "  - identity: {}\n" + "  - aescbc:\n      keys:\n" + strings.Join(keys, "")
			}
			p := filepath.Join(k.Dir, "encryption.yaml")
			if err := os.WriteFile(p, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [configmaps]\n  providers:\n"+providers), 0o600); err != nil {
				b.Fatal(err)
			}
			k.Stop()
			k.ExtraArgs = []string{"--encryption-provider-config=" + p}
			if prof.dir != "" {
				k.ExtraArgs = append(k.ExtraArgs, "--profiling=true") // the harness turns it off
			}
			k.Start()
		}

		small := max(n/10, 1)
		createConfigMaps(b, cs, 0, small)
		rotate(false)
		s1 := stewardMigrate(b, e, k, workers, useJSON, int64(small), profileOpts{})

		// The rest written in plain text, then every object made stale.
		rotate(true)
		createConfigMaps(b, cs, small, n)
		rotate(false)
		s2 := stewardMigrate(b, e, k, workers, useJSON, int64(n), prof)

		var base migrateRun
		if baseline {
			rotate(false)
			base = kubectlReplace(b, e, k, kubectl, n)
		}

		// The inventory of a snapshot of the same cluster.
		cli := e.Client()
		snap := filepath.Join(b.TempDir(), "snapshot.db")
		saveSnapshot(b, cli, snap)
		cli.Close()
		start := time.Now()
		out, err := exec.Command(e.Bin, "inspect", "storage-versions", "--snapshot", snap, "-o", "json", "--dir", e.Dir).Output()
		invDur := time.Since(start)
		if err != nil {
			b.Fatalf("steward inspect: %v", err)
		}
		var rep kstorage.Report
		if err := json.Unmarshal(out, &rep); err != nil {
			b.Fatal(err)
		}
		var cmEnc int64
		for _, r := range rep.Resources {
			if r.Resource == "configmaps" {
				cmEnc = r.EncryptedObjects
			}
		}
		if cmEnc < int64(n) {
			b.Errorf("after the migrations %d config maps are encrypted, want at least %d", cmEnc, n)
		}
		fi, _ := os.Stat(snap)

		b.ReportMetric(float64(n), "objects")
		b.ReportMetric(float64(small)/s1.dur.Seconds(), "steward-small-objects/s")
		b.ReportMetric(float64(s1.maxRSS)/1024, "steward-small-peak-rss-MB")
		b.ReportMetric(float64(n)/s2.dur.Seconds(), "steward-objects/s")
		b.ReportMetric(float64(s2.maxRSS)/1024, "steward-peak-rss-MB")
		b.ReportMetric(float64(s2.anonPeak)/1024, "steward-peak-anon-MB")
		b.ReportMetric(s2.cpu.Seconds()/float64(n)*1e6, "steward-cpu-us/object")
		b.ReportMetric(s2.apiCPU.Seconds()/float64(n)*1e6, "steward-apiserver-cpu-us/object")
		b.ReportMetric(s2.etcdCPU.Seconds()/float64(n)*1e6, "steward-etcd-cpu-us/object")
		if baseline {
			b.ReportMetric(float64(n)/base.dur.Seconds(), "kubectl-objects/s")
			b.ReportMetric(float64(base.maxRSS)/1024, "kubectl-peak-rss-MB")
			b.ReportMetric(base.cpu.Seconds()/float64(n)*1e6, "kubectl-cpu-us/object")
			b.ReportMetric(base.apiCPU.Seconds()/float64(n)*1e6, "kubectl-apiserver-cpu-us/object")
			b.ReportMetric(base.etcdCPU.Seconds()/float64(n)*1e6, "kubectl-etcd-cpu-us/object")
		}
		b.ReportMetric(float64(rep.Totals.Objects)/invDur.Seconds(), "inventory-snapshot-objects/s")
		say("%d config maps: steward %s (%.0f objects/s, max RSS %d MB, peak anon %d MB); on %d: %s (%.0f objects/s, max RSS %d MB)",
			n, s2.dur.Round(time.Millisecond), float64(n)/s2.dur.Seconds(), s2.maxRSS/1024, s2.anonPeak/1024,
			small, s1.dur.Round(time.Millisecond), float64(small)/s1.dur.Seconds(), s1.maxRSS/1024)
		if baseline {
			say("kubectl get -A -o json | kubectl replace -f -: %s (%.0f objects/s, max RSS of get + replace %d MB)",
				base.dur.Round(time.Millisecond), float64(n)/base.dur.Seconds(), base.maxRSS/1024)
		}
		say("inventory of the snapshot (%.0f MB, %d objects): %s, %.0f objects/s",
			float64(fi.Size())/1e6, rep.Totals.Objects, invDur.Round(time.Millisecond), float64(rep.Totals.Objects)/invDur.Seconds())
	}
}

// createConfigMaps creates config maps cm-FROM ... cm-TO-1 in the 100
// namespaces, 32 at a time.
func createConfigMaps(b *testing.B, cs kubernetes.Interface, from, to int) {
	start := time.Now()
	payload := strings.Repeat("x", 600)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	work := make(chan int, 64)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				_, err := cs.CoreV1().ConfigMaps(fmt.Sprintf("ns-%03d", i%100)).Create(b.Context(), &corev1.ConfigMap{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%07d", i)},
					Data:       map[string]string{"payload": payload, "index": strconv.Itoa(i)},
				}, metav1.CreateOptions{})
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	say("created %d config maps in %s", to-from, time.Since(start).Round(time.Millisecond))
}

type migrateRun struct {
	dur              time.Duration
	cpu              time.Duration // user + system of the migrating process(es)
	apiCPU, etcdCPU  time.Duration // of kube-apiserver and etcd during the run
	maxRSS, anonPeak int64         // KiB
}

func cpuTime(ps *os.ProcessState) time.Duration { return ps.UserTime() + ps.SystemTime() }

// serverCPU samples the CPU time kube-apiserver and etcd used so far;
// the returned function gives what they used since.
func serverCPU(e *harness.Env, k *harness.KubeAPIServer) (since func() (api, etcd time.Duration)) {
	apiPid, etcdPid := k.Pid(), e.MemberPID(e.Spec().Members[0].Name)
	api0, etcd0 := procCPU(apiPid), procCPU(etcdPid)
	return func() (time.Duration, time.Duration) {
		return procCPU(apiPid) - api0, procCPU(etcdPid) - etcd0
	}
}

// procCPU returns a process's user + system CPU time so far (fields 14
// and 15 of /proc/PID/stat, in USER_HZ = 100 ticks a second); 0 when it
// cannot be read.
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces
	f := strings.Fields(s[i+1:])       // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * (time.Second / 100)
}

// profileOpts say where to write CPU profiles of a migration (dir empty:
// none), and for how long to profile kube-apiserver.
type profileOpts struct {
	dir     string
	seconds int
}

// profileAPIServer fetches a CPU profile of the next seconds of
// kube-apiserver (its /debug/pprof, on by default, for the admin token)
// into path; wait returns once it is written.
func profileAPIServer(b *testing.B, k *harness.KubeAPIServer, seconds int, path string) (wait func()) {
	hc, err := rest.HTTPClientFor(k.RESTConfig())
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		res, err := hc.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", k.URL, seconds))
		if err != nil {
			done <- err
			return
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err == nil && res.StatusCode != 200 {
			err = fmt.Errorf("%s: %s", res.Status, body)
		}
		if err == nil {
			err = os.WriteFile(path, body, 0o600)
		}
		done <- err
	}()
	return func() {
		if err := <-done; err != nil {
			b.Errorf("profile of kube-apiserver: %v", err)
		}
	}
}

// stewardMigrate runs `steward migrate storage --resources configmaps`
// and checks that it rewrote at least want objects.
func stewardMigrate(b *testing.B, e *harness.Env, k *harness.KubeAPIServer, workers int, useJSON bool, want int64, prof profileOpts) migrateRun {
	args := []string{"migrate", "storage", "--kubeconfig", k.Kubeconfig, "--resources", "configmaps",
		"--qps", "0", "--workers", strconv.Itoa(workers), "--protobuf=" + strconv.FormatBool(!useJSON), "-o", "json", "--dir", e.Dir}
	wait := func() {}
	if prof.dir != "" {
		args = append(args, "--cpu-profile", filepath.Join(prof.dir, "steward.pprof"))
		wait = profileAPIServer(b, k, prof.seconds, filepath.Join(prof.dir, "kube-apiserver.pprof"))
	}
	cmd := exec.Command(e.Bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	servers := serverCPU(e, k)
	start := time.Now()
	var run migrateRun
	run.anonPeak, run.maxRSS = runSampled(b, cmd, 10*time.Millisecond, "steward migrate", &errOut)
	run.dur = time.Since(start)
	run.cpu = cpuTime(cmd.ProcessState)
	run.apiCPU, run.etcdCPU = servers()
	wait()
	var rep kmigrate.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		b.Fatal(err)
	}
	if len(rep.Resources) != 1 || rep.Resources[0].ThisRun.Migrated < want || rep.Totals.Failed != 0 {
		b.Fatalf("steward migrate: %+v, want %d config maps migrated", rep.Resources, want)
	}
	say("steward migrate storage: %d config maps in %s (CPU %s; kube-apiserver %s, etcd %s), max RSS %d MB; %s", rep.Resources[0].ThisRun.Migrated,
		run.dur.Round(time.Millisecond), run.cpu.Round(time.Millisecond), run.apiCPU.Round(time.Millisecond), run.etcdCPU.Round(time.Millisecond),
		run.maxRSS/1024, harness.LastLines(errOut.String(), 1))
	return run
}

// kubectlReplace runs `kubectl get configmaps -A -o json | kubectl
// replace -f -` and checks that it replaced at least want objects.
func kubectlReplace(b *testing.B, e *harness.Env, k *harness.KubeAPIServer, kubectl string, want int) migrateRun {
	kubeconfig := k.Kubeconfig
	get := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "configmaps", "-A", "-o", "json")
	replace := exec.Command(kubectl, "--kubeconfig", kubeconfig, "replace", "-f", "-")
	pipe, err := get.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	replace.Stdin = pipe
	var getErr, repErr bytes.Buffer
	get.Stderr, replace.Stderr = &getErr, &repErr
	out, err := replace.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	servers := serverCPU(e, k)
	start := time.Now()
	if err := replace.Start(); err != nil {
		b.Fatal(err)
	}
	if err := get.Start(); err != nil {
		b.Fatal(err)
	}
	replaced := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), " replaced") {
			replaced++
		}
	}
	if err := get.Wait(); err != nil {
		b.Fatalf("kubectl get: %v\n%s", err, getErr.String())
	}
	if err := replace.Wait(); err != nil {
		b.Fatalf("kubectl replace: %v\n%s", err, harness.LastLines(repErr.String(), 10))
	}
	run := migrateRun{dur: time.Since(start), cpu: cpuTime(get.ProcessState) + cpuTime(replace.ProcessState)}
	run.apiCPU, run.etcdCPU = servers()
	run.maxRSS = get.ProcessState.SysUsage().(*syscall.Rusage).Maxrss + replace.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
	if replaced < want {
		b.Fatalf("kubectl replaced %d config maps, want %d\n%s", replaced, want, harness.LastLines(repErr.String(), 10))
	}
	say("kubectl get | kubectl replace: %d config maps in %s (CPU %s; kube-apiserver %s, etcd %s), max RSS get %d MB + replace %d MB", replaced,
		run.dur.Round(time.Millisecond), run.cpu.Round(time.Millisecond), run.apiCPU.Round(time.Millisecond), run.etcdCPU.Round(time.Millisecond),
		get.ProcessState.SysUsage().(*syscall.Rusage).Maxrss/1024, replace.ProcessState.SysUsage().(*syscall.Rusage).Maxrss/1024)
	return run
}

// say prints a line to stderr: go test keeps only the first ten lines a
// benchmark logs.
func say(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "BenchmarkMigrateConfigMaps: "+format+"\n", a...)
}
