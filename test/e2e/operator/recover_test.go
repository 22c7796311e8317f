package operator_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/localkube"
	"github.com/etcd-steward/steward/test/harness"
	"github.com/etcd-steward/steward/test/operatorfixture"
)

// getRevision reads key through db-client and returns its value and the
// response's revision.
func getRevision(t *testing.T, cs *kubernetes.Clientset, ns, image, key string) (string, int64) {
	t.Helper()
	out := operatorfixture.ClientPod(t, cs, ns, image, "get", key, "-w", "json")
	var resp struct {
		Header struct {
			Revision int64 `json:"revision"`
		} `json:"header"`
		Kvs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &resp); err != nil {
		t.Fatalf("etcdctl get %s -w json: %v\n%s", key, err, out)
	}
	v := ""
	if len(resp.Kvs) > 0 {
		v = string(resp.Kvs[0].Value)
	}
	return v, resp.Header.Revision
}

// watchPod starts etcdctl watch --prefix PREFIX --rev REV -w json in a pod
// against db-client and returns the pod's name; it runs until the watch
// ends (NAME).
func watchPod(t *testing.T, cs *kubernetes.Clientset, ns, image, name, prefix string, rev int64) string {
	t.Helper()
	pod := operatorfixture.EtcdctlPod(name, ns, image, []string{"watch", "--prefix", prefix, fmt.Sprintf("--rev=%d", rev), "-w", "json"})
	if _, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 2*time.Minute, 500*time.Millisecond, "watch pod running", func() error {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase == corev1.PodPending {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	return name
}

// watchSeen parses a watch pod's output: the revisions of its events in
// order, whether it was told of a compaction, and the text that is not an
// event.
func watchSeen(out string) (revs []int64, keys []string, compacted bool, other []string) {
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		var resp struct {
			CompactRevision int64 `json:"CompactRevision"`
			Canceled        bool  `json:"Canceled"`
			Events          []struct {
				Kv struct {
					Key         []byte `json:"key"`
					ModRevision int64  `json:"mod_revision"`
				} `json:"kv"`
			} `json:"Events"`
		}
		if json.Unmarshal([]byte(l), &resp) != nil {
			other = append(other, l)
			if strings.Contains(l, "compacted") {
				compacted = true
			}
			continue
		}
		if resp.CompactRevision != 0 {
			compacted = true
		}
		for _, e := range resp.Events {
			revs = append(revs, e.Kv.ModRevision)
			keys = append(keys, string(e.Kv.Key))
		}
	}
	return revs, keys, compacted, other
}

// TestOperatorQuorumLoss: a 3-member EtcdCluster with continuous backups
// and recovery.mode auto loses the volumes and pods of two members
// (quorum loss, DEP-01 table 10); after the grace period the operator
// recovers it by itself through pkg/recovery: Ready again with three
// members, every acknowledged write present, the revision not gone
// backwards (a watch from before the loss never sees an older revision;
// one started after it from an old revision is told of the compaction or
// sees only newer ones), the recovery in status.lastOperation and in Events
// (QuorumLost, Recovering, Recovered).
func TestOperatorQuorumLoss(t *testing.T) {
	t.Parallel() // beside the other tests of setupShared
	harness.ForEachLocalKube(t, operatorQuorumLoss)
}

func operatorQuorumLoss(t *testing.T, c *localkube.Cluster) {
	const ns = "op-recover"
	image := operatorfixture.StewardImage(t, c)
	cs, cl := operatorfixture.SetupShared(t, c, ns, image)
	operatorfixture.S3Secret(t, c, cs, ns)
	ec := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns},
		Spec: v1alpha1.EtcdClusterSpec{Replicas: 3,
			Backup: &v1alpha1.Backup{
				S3:            &v1alpha1.S3{Endpoint: c.S3Endpoint, Bucket: c.S3Bucket, Prefix: ns + "/", CredentialsSecret: "s3"},
				DeltaMaxAgeMs: 1000,
			},
			Recovery: v1alpha1.Recovery{Mode: "auto", GracePeriodSeconds: 15},
		},
	}
	operatorfixture.CreateClusters(t, cs, cl, ec)
	healthy := func(what string, timeout time.Duration, extra func(st v1alpha1.EtcdClusterStatus) error) v1alpha1.EtcdClusterStatus {
		return operatorfixture.WaitHealthy(t, cl, ec, 3, what, timeout, extra)
	}
	healthy("EtcdCluster db Ready and backed up", 8*time.Minute, func(st v1alpha1.EtcdClusterStatus) error {
		if st.LastBackupTime == nil {
			return fmt.Errorf("no last backup time")
		}
		return nil
	})

	// Acknowledged writes, then the newest one backed up.
	const writes = 3
	var wrote time.Time
	for i := range writes {
		// lastBackupTime has whole seconds.
		wrote = time.Now().Truncate(time.Second)
		operatorfixture.ClientPod(t, cs, ns, image, "put", fmt.Sprintf("/recover/k%d", i), fmt.Sprintf("v%d", i))
	}
	_, revBefore := getRevision(t, cs, ns, image, "/recover/k0")
	healthy("a backup after the writes", 2*time.Minute, func(st v1alpha1.EtcdClusterStatus) error {
		if st.LastBackupTime == nil || st.LastBackupTime.Time.Before(wrote) {
			return fmt.Errorf("last backup %v, writes at %s", st.LastBackupTime, wrote.Format(time.RFC3339))
		}
		return nil
	})

	watch := watchPod(t, cs, ns, image, "watch-before", "/recover/", revBefore+1)

	// Quorum loss: the volumes and pods of db-1 and db-2 deleted.
	lost := time.Now()
	operatorfixture.DeleteVolumesAndPods(t, cs, ns, "db-1", "db-2")

	st := healthy("EtcdCluster db Ready again after the quorum loss", 10*time.Minute, func(st v1alpha1.EtcdClusterStatus) error {
		if op := st.LastOperation; op == nil || op.Type != "Recover" || op.State != "Succeeded" {
			return fmt.Errorf("last operation %+v", st.LastOperation)
		}
		return nil
	})
	took := time.Since(lost)
	t.Logf("quorum loss (2 of 3 volumes and pods deleted) -> Ready: %s; %s", took.Round(time.Second), st.LastOperation.Description)

	for i := range writes {
		k := fmt.Sprintf("/recover/k%d", i)
		if v, _ := getRevision(t, cs, ns, image, k); v != fmt.Sprintf("v%d", i) {
			t.Errorf("%s after the recovery: %q, want v%d", k, v, i)
		}
	}
	if _, revAfter := getRevision(t, cs, ns, image, "/recover/k0"); revAfter < revBefore {
		t.Errorf("revision went backwards: %d before the quorum loss, %d after", revBefore, revAfter)
	}

	// The watch from before: never an older revision.
	operatorfixture.ClientPod(t, cs, ns, image, "put", "/recover/after", "x")
	var wout string
	harness.Eventually(t, time.Minute, time.Second, "the watch from before the loss sees the write after it or ends", func() error {
		b, err := cs.CoreV1().Pods(ns).GetLogs(watch, &corev1.PodLogOptions{}).DoRaw(t.Context())
		if err != nil {
			return err
		}
		wout = string(b)
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), watch, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if _, keys, _, _ := watchSeen(wout); slices.Contains(keys, "/recover/after") || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			return nil
		}
		return fmt.Errorf("watch pod %s; output %q", p.Status.Phase, operatorfixture.Tail(wout, 5))
	})
	revs, keys, compacted, other := watchSeen(wout)
	t.Logf("watch from revision %d through the recovery: revisions %v keys %v compacted %v, other output %q", revBefore+1, revs, keys, compacted, other)
	for i, r := range revs {
		if r <= revBefore || (i > 0 && r <= revs[i-1]) {
			t.Errorf("watch from before the loss saw revision %d after %v (before the loss: %d)", r, revs[:i], revBefore)
		}
	}
	// A watch from an old revision started after the recovery: told it
	// was compacted, or only revisions above those served before.
	old := watchPod(t, cs, ns, image, "watch-after", "/recover/", revBefore)
	harness.Eventually(t, time.Minute, time.Second, "the watch from an old revision told of the compaction or given events", func() error {
		b, err := cs.CoreV1().Pods(ns).GetLogs(old, &corev1.PodLogOptions{}).DoRaw(t.Context())
		if err != nil {
			return err
		}
		wout = string(b)
		if revs, _, compacted, _ := watchSeen(wout); compacted || len(revs) > 0 {
			return nil
		}
		return fmt.Errorf("output %q", operatorfixture.Tail(wout, 5))
	})
	revs, keys, compacted, other = watchSeen(wout)
	t.Logf("watch from revision %d after the recovery: revisions %v keys %v compacted %v, other output %q", revBefore, revs, keys, compacted, other)
	if !compacted {
		for _, r := range revs {
			if r < revBefore {
				t.Errorf("watch from revision %d after the recovery saw revision %d", revBefore, r)
			}
		}
	}

	reasons := operatorfixture.RequireEvents(t, cs, ns, "db", "QuorumLost", "Recovering", "Recovered")
	t.Logf("event Recovered: %s", reasons["Recovered"])
}
