package operator

import (
	"context"
	"errors"
	"fmt"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/etcd-steward/steward/api/v1alpha1"
)

// Config is what the operator runs with (`steward operator` fills it from
// its flags).
type Config struct {
	// StateDir holds one Steward directory per EtcdCluster
	// (STATE/NAMESPACE/NAME).
	StateDir string
	// MetricsAddress and HealthAddress are where the manager serves
	// Prometheus metrics and /healthz, /readyz ("0": not served).
	MetricsAddress, HealthAddress string
	// LeaderElect: act only while holding the Lease LeaderElectionID in
	// LeaderElectionNamespace, so a second replica never acts.
	LeaderElect             bool
	LeaderElectionNamespace string
	// Namespace, when set, is the one namespace watched.
	Namespace string
	// MemberImage is the Steward image of the member pods (empty: the
	// image of the operator's own pod, named by POD_NAMESPACE and
	// POD_NAME, which its Deployment sets from the downward API);
	// PullPolicy its pull policy (default IfNotPresent).
	MemberImage string
	PullPolicy  string
	// BinaryStore is the operator's store of etcd versions, where a
	// resource's spec.version is checked (the image's
	// /opt/steward/binaries).
	BinaryStore string
	// StewardBinary runs the certificate renewal process of each cluster
	// (default: this executable).
	StewardBinary string
	// ClusterDomain is the cluster's DNS domain (default cluster.local).
	ClusterDomain string
	// RESTConfig reaches the Kubernetes API (default: in-cluster or the
	// KUBECONFIG, as controller-runtime finds it).
	RESTConfig *rest.Config
}

// LeaderElectionID is the Lease the operator replicas elect a leader on.
const LeaderElectionID = "steward-operator.steward.etcd.io"

// ErrConfig refuses a Config that cannot run.
var ErrConfig = errors.New("operator configuration")

// Scheme is the operator's: Kubernetes' types and EtcdCluster.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// prepareStateDir makes the state directory, 0700: a Steward directory
// must be private, its parent included (the certificate renewal refuses
// one whose ancestor others can write), and a fresh volume (an emptyDir is
// 0777) is made the operator's own.
func prepareStateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}

// ErrNoMemberImage: no member image was given and the operator's own
// pod does not say one.
var ErrNoMemberImage = errors.New("no image for the member pods")

// ownImage is the image of the operator's own pod (POD_NAMESPACE and
// POD_NAME): the member pods run the same Steward.
func ownImage(ctx context.Context, rc *rest.Config, scheme *runtime.Scheme) (string, error) {
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if ns == "" || name == "" {
		return "", fmt.Errorf("%w: POD_NAMESPACE and POD_NAME are not set, so the operator's own image is unknown", ErrNoMemberImage)
	}
	cl, err := client.New(rc, client.Options{Scheme: scheme})
	if err != nil {
		return "", err
	}
	var pod corev1.Pod
	if err := cl.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &pod); err != nil {
		return "", fmt.Errorf("%w: read the operator's pod %s/%s: %v", ErrNoMemberImage, ns, name, err)
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == "operator" {
			return c.Image, nil
		}
	}
	if len(pod.Spec.Containers) > 0 {
		return pod.Spec.Containers[0].Image, nil
	}
	return "", fmt.Errorf("%w: pod %s/%s has no container", ErrNoMemberImage, ns, name)
}

// ownedSelector selects what the operator made: every object it makes
// carries LabelManagedBy=steward (objectLabels).
var ownedSelector = labels.SelectorFromSet(labels.Set{LabelManagedBy: "steward"})

// cacheOptions are the manager's cache and client options (namespace: the
// one watched, "" for all). The cache holds the EtcdClusters and, of the
// kinds the reconciler watches (Owns), only the objects the operator made
// (ownedSelector): never another application's Secrets, StatefulSets,
// Services or PodDisruptionBudgets. Reads of the kinds it does not watch
// (claims, ServiceAccounts, Roles, RoleBindings, Leases: every node's and
// every application's Leases would be cached otherwise) and of Secrets
// (the users' credentials Secrets carry no label of the operator's) go to
// the API server uncached: the ClusterRole grants get, not list or watch,
// on them (reconcile.go's RBAC markers).
func cacheOptions(namespace string) (cache.Options, client.Options) {
	owned := cache.ByObject{Label: ownedSelector}
	co := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}:                owned,
		&appsv1.StatefulSet{}:           owned,
		&corev1.Service{}:               owned,
		&policyv1.PodDisruptionBudget{}: owned,
	}}
	if namespace != "" {
		co.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	return co, client.Options{Cache: &client.CacheOptions{DisableFor: uncached()}}
}

// uncached are the kinds the operator's client reads from the API server,
// never from its cache (cacheOptions).
func uncached() []client.Object {
	return []client.Object{
		&corev1.Secret{}, &corev1.PersistentVolumeClaim{}, &corev1.ServiceAccount{},
		&rbacv1.Role{}, &rbacv1.RoleBinding{}, &coordinationv1.Lease{},
	}
}

// Run runs the operator until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if cfg.StateDir == "" {
		return fmt.Errorf("%w: no state directory", ErrConfig)
	}
	if err := prepareStateDir(cfg.StateDir); err != nil {
		return err
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = DefaultClusterDomain
	}
	if cfg.StewardBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		cfg.StewardBinary = exe
	}
	rc := cfg.RESTConfig
	if rc == nil {
		var err error
		if rc, err = ctrl.GetConfig(); err != nil {
			return fmt.Errorf("reach the Kubernetes API: %w", err)
		}
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	if cfg.MemberImage == "" {
		if cfg.MemberImage, err = ownImage(ctx, rc, scheme); err != nil {
			return err
		}
	}
	o := ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: cfg.MetricsAddress},
		HealthProbeBindAddress:  cfg.HealthAddress,
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        LeaderElectionID,
		LeaderElectionNamespace: cfg.LeaderElectionNamespace,
		// The operator's state is on its volume: a leader that lost its
		// Lease stops at once, so two never write one directory.
		LeaderElectionReleaseOnCancel: true,
	}
	o.Cache, o.Client = cacheOptions(cfg.Namespace)
	if cfg.Namespace != "" && o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = cfg.Namespace
	}
	mgr, err := ctrl.NewManager(rc, o)
	if err != nil {
		return err
	}
	r := &Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: mgr.GetEventRecorder("steward-operator"), Config: cfg}
	if err := r.SetupWithManager(mgr); err != nil {
		return err
	}
	// Coordinator processes and per-cluster goroutines (lifecycle.go).
	for _, c := range r.life.collectors() {
		if err := metrics.Registry.Register(c); err != nil {
			return fmt.Errorf("operator metrics: %w", err)
		}
	}
	if cfg.HealthAddress != "" && cfg.HealthAddress != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}
