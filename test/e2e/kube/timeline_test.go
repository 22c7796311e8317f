package kube_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/etcd-steward/steward/test/harness"
)

// TestInformerAcrossRestores (issue 26, deliverable 2): a client-go
// informer on config maps, through a kube-apiserver that keeps running,
// held across two restores: the newest point, then an early revision of
// the first timeline after the history advanced on the second. It never
// sees a resourceVersion go backwards; after each restore it re-lists
// (the restore marked the old range compacted) and sees what is written
// on the new timeline, and its store drops what the restore abandoned.
// Without the bump above every revision served, the config map written
// after the second restore got a resourceVersion below the ones the
// informer had seen, and never reached its store.
func TestInformerAcrossRestores(t *testing.T) {
	t.Parallel()
	e := harness.New(t)
	e.Up(3, "3.6.16")
	k := e.StartKubeAPIServer()
	cs := k.Clientset()
	const ns = "timelines"
	tlCreate(t, cs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	harness.BackupNow(t, e) // a full backup before the early revision

	ictx, stopInformer := context.WithCancel(t.Context())
	var iwg sync.WaitGroup
	t.Cleanup(func() { stopInformer(); iwg.Wait() }) // before the API server and the cluster stop
	r := lcStartInformer(ictx, t, &iwg, "configmaps", &corev1.ConfigMap{}, &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().ConfigMaps(ns).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ConfigMaps(ns).Watch(ctx, o)
		},
	})
	harness.Eventually(t, time.Minute, 100*time.Millisecond, "the informer to sync", func() error {
		if !r.inf.HasSynced() {
			return fmt.Errorf("not synced: %s", r.counts())
		}
		return nil
	})
	inStore := func(name string, want bool) {
		t.Helper()
		harness.Eventually(t, 2*time.Minute, 100*time.Millisecond, fmt.Sprintf("%s in the informer's store: %v", name, want), func() error {
			_, ok, err := r.inf.GetStore().GetByKey(ns + "/" + name)
			if err != nil || ok != want {
				return fmt.Errorf("in the store: %v (%v); the informer: %s; errors: %v; backwards: %v", ok, err, r.counts(), r.errorsSince(lcCounts{}), r.backwardsSeen())
			}
			return nil
		})
	}
	noneBackwards := func(when string) {
		t.Helper()
		if b := r.backwardsSeen(); len(b) > 0 {
			t.Fatalf("%s: the informer saw resourceVersions go backwards: %v", when, b)
		}
	}
	restore := func(args ...string) lcCounts {
		t.Helper()
		before := r.counts()
		e.MustRun("down")
		e.MustRun(append([]string{"restore", "--force"}, args...)...)
		e.MustRun("up")
		return before
	}

	early := tlConfigMap(t, cs, ns, "t1-early")
	last1 := tlConfigMap(t, cs, ns, "t1-last")
	inStore("t1-last", true)
	harness.WaitBackedUp(t, e, last1)

	// Timeline 2: the newest point of timeline 1.
	before := restore()
	t2 := tlConfigMap(t, cs, ns, "t2-abandoned")
	if t2 <= last1 {
		t.Fatalf("a config map written after the first restore has resourceVersion %d, not above %d", t2, last1)
	}
	inStore("t2-abandoned", true)
	if c := r.counts().since(before); c.relists == 0 {
		t.Errorf("the informer did not re-list after the first restore: %s", c)
	}
	noneBackwards("after the first restore")
	harness.WaitBackedUp(t, e, t2)

	// Timeline 3: an early revision of timeline 1, after timeline 2
	// advanced.
	before = restore("--to-revision", fmt.Sprint(early))
	t3 := tlConfigMap(t, cs, ns, "t3")
	if t3 <= t2 {
		t.Fatalf("a config map written after the restore to revision %d has resourceVersion %d, not above %d served on timeline 2", early, t3, t2)
	}
	inStore("t3", true)
	inStore("t2-abandoned", false)
	inStore("t1-last", false)
	inStore("t1-early", true)
	if c := r.counts().since(before); c.relists == 0 {
		t.Errorf("the informer did not re-list after the restore to an early revision: %s", c)
	}
	noneBackwards("after the restore to an early revision")
}

// tlConfigMap creates a config map once the API serves again after a
// restore (retrying until it does) and returns its resourceVersion.
func tlConfigMap(t *testing.T, cs kubernetes.Interface, ns, name string) int64 {
	t.Helper()
	var rv int64
	harness.Eventually(t, 2*time.Minute, 200*time.Millisecond, "config map "+name+" created", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		cm, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cm, err = cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		rv = lcRV(t, cm.ResourceVersion)
		return nil
	})
	return rv
}

func tlCreate(t *testing.T, cs kubernetes.Interface, n *corev1.Namespace) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
