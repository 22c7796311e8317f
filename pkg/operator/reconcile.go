package operator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/recovery"
	"github.com/etcd-steward/steward/pkg/status"
)

// RBAC of the operator (make generate writes deploy/operator/rbac/role.yaml):
// what the code uses and nothing more. The kinds the reconciler watches
// (For, Owns) need list and watch; everything else it reads uncached
// (manager.go, cacheOptions) with get, and writes with create and update
// (controllerutil.CreateOrUpdate): it never deletes, patches or lists them
// (what it makes goes with its EtcdCluster through owner references; the
// claims are kept). Update on etcdclusters/finalizers is what an owner
// reference with blockOwnerDeletion needs. Events go through the
// events.k8s.io API (mgr.GetEventRecorder). Its own pod (the member
// image) and the leader election Lease are read in its own namespace
// (rbac/leader_election_role.yaml).
//
// +kubebuilder:rbac:groups=steward.etcd.io,resources=etcdclusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=steward.etcd.io,resources=etcdclusters/status,verbs=update
// +kubebuilder:rbac:groups=steward.etcd.io,resources=etcdclusters/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services;secrets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=serviceaccounts,verbs=get;create;update
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,resources=roles;rolebindings,verbs=get;create;update
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update

// RequeueAfter is how often a cluster's status is refreshed with nothing
// else happening.
const RequeueAfter = 10 * time.Second

// MaxConcurrentReconciles is how many resources are reconciled at once: a
// long step of one cluster (up, a restore, a member added: minutes) does
// not hold up the others (docs/operator.md: Reconciles).
const MaxConcurrentReconciles = 4

// Reconciler makes and reports the etcd cluster of each EtcdCluster.
//
// Up to MaxConcurrentReconciles resources are reconciled at once, each by
// one worker at a time: controller-runtime's work queue never hands one
// key (NAMESPACE/NAME) to two workers, and each reconcile also holds its
// run's reconcileMu (lifecycle.go, keyed by UID), so the Steward directory
// of a resource has one reconcile writing it. Config and the client never
// change after SetupWithManager; the fields below say their locks.
type Reconciler struct {
	Client client.Client
	// APIReader reads from the API server, never the cache (nil: Client):
	// the cache holds only the operator's own objects of the kinds it
	// watches (cacheOptions), so a check for someone else's object of
	// those kinds (foreign) must ask the API server.
	APIReader client.Reader
	Recorder  events.EventRecorder
	Config    Config

	// mu guards ops.
	mu sync.Mutex
	// ops is the newest operation per resource (NAMESPACE/NAME), guarded
	// by mu: Reconcile keeps it until the status carries it.
	ops map[string]*v1alpha1.Operation

	// reports remembers what of the automatic recovery was reported
	// (recover.go).
	reports recoveryReports
	// versions runs the version plans (upgrade.go); it has its own lock.
	versions versionRunner
	// life keeps what runs per resource beside the reconciles
	// (lifecycle.go); it has its own lock. initLife sets it up once.
	life     lifecycle
	initLife sync.Once
}

// setupLife gives the lifecycle the state directory and a logger.
func (r *Reconciler) setupLife(log logr.Logger) {
	r.initLife.Do(func() {
		r.life.stateDir = r.Config.StateDir
		r.life.log = log.WithName("lifecycle")
	})
}

// controllerOptions are the EtcdCluster controller's.
func controllerOptions() controller.Options {
	return controller.Options{MaxConcurrentReconciles: MaxConcurrentReconciles}
}

// SetupWithManager registers the reconciler: EtcdClusters and what they
// own.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.ops = map[string]*v1alpha1.Operation{}
	r.setupLife(mgr.GetLogger())
	// Stops every run and coordinator when the manager stops.
	if err := mgr.Add(lifecycleRunnable{&r.life}); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		WithOptions(controllerOptions()).
		For(&v1alpha1.EtcdCluster{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.Secret{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		// Not the Leases it owns: every member renews its own every few
		// seconds, and the reconciler does not read them.
		Named("etcdcluster").
		Complete(r)
}

func (r *Reconciler) event(ec *v1alpha1.EtcdCluster, typ, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(ec, nil, typ, reason, action, "%s", EventMessage(fmt.Sprintf(format, args...)))
	}
}

// MaxEventMessage is the longest message the API server accepts in an
// event (events.k8s.io: 1024 bytes); a longer one is rejected, and the
// event lost.
const MaxEventMessage = 1024

// EventMessage is msg cut to MaxEventMessage bytes (on a character
// boundary, ending in "..."): the status condition keeps the whole text.
func EventMessage(msg string) string {
	if len(msg) <= MaxEventMessage {
		return msg
	}
	cut := MaxEventMessage - len("...")
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}

func (r *Reconciler) setOp(ec *v1alpha1.EtcdCluster, typ, state, desc string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := ec.Namespace + "/" + ec.Name
	now := metav1.Now()
	op := r.ops[key]
	if op == nil || op.Type != typ || op.State != "Running" {
		op = &v1alpha1.Operation{Type: typ, StartTime: now}
		if ec.Status.LastOperation != nil && ec.Status.LastOperation.Type == typ && ec.Status.LastOperation.State == "Running" {
			op.StartTime = ec.Status.LastOperation.StartTime
		}
	}
	op.State, op.Description = state, desc
	if state != "Running" {
		op.EndTime = &now
	}
	r.ops[key] = op
}

// op is a copy of the cluster's newest operation: the one in r.ops is
// changed in place under r.mu (setOp, the plan goroutine's setPlanOp),
// while the copy goes into a status the API client reads and writes
// without the lock.
func (r *Reconciler) op(ec *v1alpha1.EtcdCluster) *v1alpha1.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ops[ec.Namespace+"/"+ec.Name].DeepCopy()
}

// Reconcile brings one EtcdCluster a step closer to what it asks for and
// reports its status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	r.setupLife(log)
	var ec v1alpha1.EtcdCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &ec); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(ctx, req.String(), "the EtcdCluster was deleted")
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !ec.DeletionTimestamp.IsZero() {
		// Everything it owns goes with it (owner references); claims and
		// backups are kept. What the operator runs for it stops now.
		r.forget(ctx, req.String(), "the EtcdCluster is being deleted")
		return ctrl.Result{}, nil
	}
	run, replaced, err := r.life.run(ctx, &ec)
	if err != nil {
		return ctrl.Result{}, nil // the operator stops
	}
	if replaced {
		r.forgetState(req.String())
	}
	run.reconcileMu.Lock()
	defer run.reconcileMu.Unlock()
	c, err := r.ensure(ctx, &ec)
	if err != nil {
		log.Error(err, "reconcile")
		evReason := "ReconcileFailed"
		switch {
		case errors.Is(err, ErrRestoreNotAuthenticated):
			evReason = "RestoreNotAuthenticated"
		case errors.Is(err, ErrNotOwned):
			evReason = ReasonObjectNotOwned
		case errors.Is(err, ErrStaleClaims):
			evReason = ReasonStaleClaims
		case errors.Is(err, ErrBackupVolume):
			evReason = ReasonBackupVolumeRefused
		case errors.Is(err, ErrCARefused):
			evReason = ReasonCARefused
		}
		r.event(&ec, corev1.EventTypeWarning, evReason, "Reconcile", "%v", err)
		// A creation that fails is reported as such; an upgrade or a
		// recovery that is running keeps its own operation.
		if op := r.op(&ec); op == nil || (op.Type == "Create" && op.State == "Running") {
			r.setOp(&ec, "Create", "Failed", err.Error())
		}
		o := Observed{StatusError: err.Error(), Volumes: r.volumes(ctx, &ec, nil), Operation: r.op(&ec)}
		switch {
		case errors.Is(err, ErrRestoreNotAuthenticated):
			o.StatusReason = "RestoreNotAuthenticated"
		case errors.Is(err, ErrRestoreFailed):
			o.StatusReason = "RestoreFailed"
		case errors.Is(err, ErrNotOwned):
			o.StatusReason = ReasonObjectNotOwned
		case errors.Is(err, ErrStaleClaims):
			o.StatusReason = ReasonStaleClaims
			o.Volumes = metav1.Condition{Type: v1alpha1.ConditionDataVolumesReady, Status: metav1.ConditionFalse, Reason: ReasonStaleClaims, Message: err.Error()}
		case errors.Is(err, ErrBackupVolume):
			o.StatusReason = ReasonBackupVolumeRefused
		case errors.Is(err, ErrCARefused):
			o.StatusReason = ReasonCARefused
		}
		if serr := r.updateStatus(ctx, &ec, o); serr != nil {
			log.Error(serr, "status")
		}
		return ctrl.Result{RequeueAfter: RequeueAfter}, nil
	}
	o := Observed{Volumes: r.volumes(ctx, &ec, c), Operation: r.op(&ec)}
	if c != nil && Hibernated(c.Dir) {
		// No member runs: nothing to ask (scale.go).
		sc := r.scale(ctx, &ec, c, nil)
		o.Scaled, o.Hibernated, o.Operation = &sc, Hibernated(c.Dir), r.op(&ec)
	} else if c != nil {
		r.recovery(ctx, &ec, c)
		if b := ec.Spec.Backup; b != nil && b.Volume != nil {
			o.QuorumLostAdvice = VolumeRecoveryAdvice(b.Volume.ClaimName)
		} else if c.Spec.Recovery.Mode != "auto" {
			o.QuorumLostAdvice = ManualRecoveryAdvice(c.Dir)
		}
		sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		st, err := status.Get(sctx, c)
		cancel()
		if err != nil {
			o.StatusError = err.Error()
		}
		// Members rebuilt, then spec.replicas acted on (scale.go), never
		// while a recovery runs: it re-adds members itself.
		if busy, rerr := recovery.Running(c); busy || rerr != nil {
			if rerr != nil {
				log.Error(rerr, "recovery lock")
			}
		} else if what, busy := r.versionPlanBusy(ec.Namespace+"/"+ec.Name, c); busy {
			// A version plan moves the members one by one and saves the
			// spec as it goes: replacing or scaling beside it would save
			// another copy of the spec over its records (one writer of a
			// Steward directory at a time). spec.replicas waits for it.
			sc := metav1.Condition{Type: ConditionScaled, Status: metav1.ConditionFalse, Reason: "UpgradeInProgress",
				Message: what + " runs: members are replaced and spec.replicas acted on once it ends"}
			o.Scaled = &sc
		} else if did, err := r.replaceLost(ctx, &ec, c, st); err != nil {
			log.Error(err, "replace")
		} else if !did {
			sc := r.scale(ctx, &ec, c, st)
			o.Scaled, o.Hibernated = &sc, Hibernated(c.Dir)
		}
		o.Operation = r.op(&ec)
		o.Status = st
		o.ClientCert = clientCertNote(&ec, c, time.Now())
		o.Upgrade = r.reconcileVersion(ctx, &ec, c, st, run)
		if bs, ok := backup.PickLoopStatus(c.LoopStatuses(ctx)); ok {
			o.LastBackup = bs.LastUpload
		}
	} else {
		o.StatusError = "the members have not started yet: waiting for every member pod's agent to answer"
	}
	if err := r.updateStatus(ctx, &ec, o); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: RequeueAfter}, nil
}

// forget stops what runs for the resource key (deleted or being deleted)
// and drops what the reconciler remembers of it.
func (r *Reconciler) forget(ctx context.Context, key, why string) {
	r.life.stopKey(ctx, key, why)
	r.forgetState(key)
}

// forgetState drops what the reconciler remembers of the resource key
// (a new resource of that name starts afresh).
func (r *Reconciler) forgetState(key string) {
	r.reports.forget(key)
	r.versions.clearRefusal(key)
	r.mu.Lock()
	delete(r.ops, key)
	r.mu.Unlock()
}

// ensure makes what ec needs and returns its cluster once it was started
// (nil while its pods' agents do not all answer yet).
func (r *Reconciler) ensure(ctx context.Context, ec *v1alpha1.EtcdCluster) (*cluster.Cluster, error) {
	dir := StateDir(r.Config.StateDir, ec)
	if owner := dirOwner(dir); owner != "" && owner != string(ec.UID) {
		// The directory of a deleted resource of this name: its
		// coordinator (if the operator missed the deletion) stops before
		// the directory is moved aside, or it would act on the new one.
		if _, err := StopCoordinators(ctx, func(d string) bool { return d == filepath.Clean(dir) }); err != nil {
			return nil, err
		}
	}
	// Claims a deleted resource of this name left: refused before
	// anything is written (claims.go).
	if err := r.staleClaims(ctx, ec, dir); err != nil {
		return nil, err
	}
	if ec.Spec.Backup != nil && ec.Spec.Backup.Volume != nil {
		// backupvolume.go: a claim every member pod can mount. Before
		// claimDir: a refused resource moves nothing aside.
		if err := r.checkBackupVolume(ctx, ec); err != nil {
			return nil, err
		}
	}
	moved, err := claimDir(dir, string(ec.UID))
	if err != nil {
		return nil, err
	}
	if moved != "" {
		r.event(ec, corev1.EventTypeNormal, "StateMovedAside", "Create", "moved the Steward directory of a deleted EtcdCluster of this name to %s", moved)
	}
	_, err = os.Stat(filepath.Join(dir, "cluster.yaml"))
	fresh := errors.Is(err, os.ErrNotExist)
	s3CA, err := r.s3Files(ctx, ec, dir)
	if err != nil {
		if fresh {
			return nil, err
		}
		// A running cluster keeps the copies written before: a Secret
		// deleted or broken later stops no reconcile (status, members,
		// recovery, plans); the event says what to fix.
		r.event(ec, corev1.EventTypeWarning, "BackupSecretUnusable", "Reconcile", "%v; the copies written before are used", err)
		s3CA = ec.Spec.Backup != nil && ec.Spec.Backup.S3 != nil && ec.Spec.Backup.S3.CASecret != ""
	}
	var userCA *pki.CA
	if ec.Spec.TLS.CASecret != "" {
		// usertls.go: checked before anything is made; installed below.
		// A running cluster issues from its copy whatever the Secret
		// holds now: a refusal there is reported, and the reconcile goes
		// on (nothing of the CA changes).
		if userCA, err = r.userCA(ctx, ec, dir, fresh); err != nil && fresh {
			return nil, err
		} else if err != nil {
			r.event(ec, corev1.EventTypeWarning, "CARefused", "Reconcile", "%v", err)
			userCA = nil
		}
	}
	if fresh && ec.Spec.Replicas == 0 {
		// Created hibernated: nothing to make until there is a member.
		r.setOp(ec, "Create", "Running", "spec.replicas is 0: the cluster is created once it is 1 or more")
		return nil, nil
	}
	if fresh && ec.Spec.RestoreFrom != nil {
		// restore.go: nothing is made before the source authenticates.
		if err := r.checkRestoreSource(ctx, ec, dir); err != nil {
			r.setOp(ec, "Restore", "Failed", err.Error())
			return nil, err
		}
	}
	if userCA != nil {
		if err := installCA(dir, userCA); err != nil {
			return nil, err
		}
		if w := CAExpiryWarning(userCA.Cert, time.Now()); w != "" {
			r.event(ec, corev1.EventTypeWarning, "CAExpiresSoon", "Create", "%s", w)
		}
	}
	say := progress.Func(func(format string, args ...any) { logf.FromContext(ctx).Info(fmt.Sprintf(format, args...)) })
	c, created, err := initDir(ctx, dir, ec, InitOptions(ec, r.Config.ClusterDomain, r.Config.BinaryStore, s3CA), say)
	if err != nil {
		return nil, err
	}
	if created {
		r.event(ec, corev1.EventTypeNormal, "Initialized", "Create", "wrote the cluster's spec, CA and join files for %d members, etcd %s", len(c.Spec.Members), c.Spec.Version)
		r.setOp(ec, "Create", "Running", "creating the member pods")
	}
	if err := r.ensureObjects(ctx, ec, c); err != nil {
		return nil, err
	}
	if id, _ := c.KnownClusterID(); id != "" {
		return c, nil
	}
	// Not started yet: up once every pod's agent answers.
	var waiting []string
	for _, a := range c.Spec.Agents {
		rt, err := c.Runtime(a.Name)
		if err == nil {
			err = rt.Ping(ctx, 3*time.Second)
		}
		if err != nil {
			waiting = append(waiting, a.Name)
		}
	}
	if len(waiting) > 0 {
		r.setOp(ec, "Create", "Running", fmt.Sprintf("waiting for the agents of %s", strings.Join(waiting, ", ")))
		return nil, nil
	}
	if ec.Spec.RestoreFrom != nil && !restored(dir) {
		// restore.go: no member starts before the restore committed.
		if c, err = r.restoreFrom(ctx, ec, c, say); err != nil {
			r.setOp(ec, "Restore", "Failed", err.Error())
			return nil, err
		}
	}
	r.event(ec, corev1.EventTypeNormal, "Starting", "Create", "every member pod's agent answers: starting %d members", len(c.Spec.Members))
	uctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, warnings, err := bootstrap.Up(uctx, dir, bootstrap.UpOptions{StewardBinary: r.Config.StewardBinary, Timeout: 2 * time.Minute}, say)
	for _, w := range warnings {
		r.event(ec, corev1.EventTypeWarning, "SpecWarning", "Create", "%s", w)
	}
	if err != nil {
		return nil, fmt.Errorf("start the members: %w", err)
	}
	r.event(ec, corev1.EventTypeNormal, "Started", "Create", "cluster is healthy: %d members, etcd %s", len(c.Spec.Members), c.Spec.Version)
	r.setOp(ec, "Create", "Succeeded", fmt.Sprintf("%d members started, etcd %s", len(c.Spec.Members), c.Spec.Version))
	if c.Spec.Backup.Continuous {
		r.event(ec, corev1.EventTypeNormal, "BackupsOn", "Create", "continuous backups on to %s", backupStoreName(ec))
	}
	return c, nil
}

// s3Files writes the credentials (and CA) of spec.backup.s3 from their
// Secrets into the Steward directory dir; it reports whether a CA was
// written.
func (r *Reconciler) s3Files(ctx context.Context, ec *v1alpha1.EtcdCluster, dir string) (bool, error) {
	b := ec.Spec.Backup
	if b == nil || b.S3 == nil {
		return false, nil
	}
	return r.writeS3Secrets(ctx, ec.Namespace, "spec.backup.s3", b.S3, dir, s3CredentialsFile, s3CAFile)
}

// writeS3Secrets writes the credentials (credFile) and, when the resource
// names one, the CA (caFile) of the S3 store at field (spec.backup.s3,
// spec.restoreFrom.s3) from their Secrets in namespace ns into dir; it
// returns whether there is a CA. Errors name the field and the Secret.
func (r *Reconciler) writeS3Secrets(ctx context.Context, ns, field string, s3 *v1alpha1.S3, dir, credFile, caFile string) (bool, error) {
	var sec corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: s3.CredentialsSecret}, &sec); err != nil {
		return false, fmt.Errorf("%s.credentialsSecret %s: %w", field, s3.CredentialsSecret, err)
	}
	creds, err := S3Credentials(s3.CredentialsSecret, sec.Data)
	if err != nil {
		return false, fmt.Errorf("%s: %w", field, err)
	}
	if err := writeSecretFile(dir, credFile, creds); err != nil {
		return false, err
	}
	if s3.CASecret == "" {
		return false, nil
	}
	var ca corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: s3.CASecret}, &ca); err != nil {
		return false, fmt.Errorf("%s.caSecret %s: %w", field, s3.CASecret, err)
	}
	if len(ca.Data["ca.crt"]) == 0 {
		return false, fmt.Errorf("%s.caSecret: %w: Secret %s needs the key ca.crt", field, ErrBadSecret, s3.CASecret)
	}
	return true, writeSecretFile(dir, caFile, ca.Data["ca.crt"])
}

// ensureObjects creates or updates the Kubernetes objects of ec.
func (r *Reconciler) ensureObjects(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster) error {
	if err := r.ensureClientCert(ctx, ec, c); err != nil {
		return err
	}
	secrets, err := r.secrets(ec, c)
	if err != nil {
		return err
	}
	objs := []client.Object{}
	for _, s := range secrets {
		objs = append(objs, s)
	}
	// The pods are the Steward spec's hosts (StatefulSetReplicas, scale.go):
	// a spec.replicas change is carried out member by member, never by
	// the StatefulSet alone; spec.version is upgrade.go's (reconcileVersion).
	pods := StatefulSetReplicas(ec, c)
	sized := ec.DeepCopy()
	sized.Spec.Replicas = int32(len(c.Spec.Agents))
	// A lease per member of the spec, kept while hibernated.
	for i := range len(c.Spec.Agents) {
		objs = append(objs, MemberLease(ec, i))
	}
	objs = append(objs, MemberAccount(ec), MemberRole(sized), MemberRoleBinding(ec),
		PeerService(ec), ClientService(ec), DisruptionBudget(ec),
		StatefulSet(ec, PodOptions{Image: r.Config.MemberImage, PullPolicy: corev1.PullPolicy(r.Config.PullPolicy), Replicas: &pods}))
	// None is taken over: one that exists and is not this resource's
	// refuses the whole set, before anything is written.
	if err := r.foreign(ctx, ec, objs); err != nil {
		return err
	}
	for _, want := range objs {
		if err := r.apply(ctx, ec, want); err != nil {
			return err
		}
	}
	// The Secret holds the client certificate renewed: the pair it
	// replaced goes now (clienttls.go).
	return r.publishedClientCert(ec, c)
}

// apply creates want, or updates the fields the operator owns of the
// existing object (never a StatefulSet's immutable ones), and only of an
// object this resource controls (its UID's controller reference): one it
// did not make is refused with ErrNotOwned, unchanged.
func (r *Reconciler) apply(ctx context.Context, ec *v1alpha1.EtcdCluster, want client.Object) error {
	kind := fmt.Sprintf("%T", want)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	cur := want.DeepCopyObject().(client.Object)
	res, err := controllerutil.CreateOrUpdate(ctx, r.Client, cur, func() error {
		if cur.GetResourceVersion() != "" && !ControlledBy(cur, ec.UID) {
			return notOwned(ec, kind, cur)
		}
		cur.SetLabels(want.GetLabels())
		cur.SetOwnerReferences(want.GetOwnerReferences())
		switch c := cur.(type) {
		case *corev1.Secret:
			c.Data = want.(*corev1.Secret).Data
		case *corev1.Service:
			w := want.(*corev1.Service)
			c.Spec.Ports, c.Spec.Selector, c.Spec.PublishNotReadyAddresses = w.Spec.Ports, w.Spec.Selector, w.Spec.PublishNotReadyAddresses
			if c.Spec.ClusterIP == "" {
				c.Spec.ClusterIP = w.Spec.ClusterIP
			}
		case *rbacv1.Role:
			c.Rules = want.(*rbacv1.Role).Rules
		case *rbacv1.RoleBinding:
			w := want.(*rbacv1.RoleBinding)
			c.Subjects = w.Subjects
			if c.RoleRef.Name == "" {
				c.RoleRef = w.RoleRef
			}
		case *coordinationv1.Lease:
			// The pod's agent renews it: its spec is not the operator's.
		case *policyv1.PodDisruptionBudget:
			c.Spec = want.(*policyv1.PodDisruptionBudget).Spec
		case *appsv1.StatefulSet:
			w := want.(*appsv1.StatefulSet)
			if c.CreationTimestamp.IsZero() {
				c.Spec = w.Spec
			} else {
				c.Spec.Replicas, c.Spec.Template, c.Spec.UpdateStrategy = w.Spec.Replicas, w.Spec.Template, w.Spec.UpdateStrategy
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", kind, want.GetName(), err)
	}
	if res == controllerutil.OperationResultCreated {
		r.event(ec, corev1.EventTypeNormal, "Created", "Create", "created %s %s", kind, want.GetName())
	}
	return nil
}

// secrets are the Secrets of ec (Secrets, built from its Steward
// directory).
func (r *Reconciler) secrets(ec *v1alpha1.EtcdCluster, c *cluster.Cluster) ([]*corev1.Secret, error) {
	return Secrets(ec, c)
}

// Secrets are the Secrets of ec, from its Steward directory: the CA's
// certificate (NAME-ca, ca.crt: never its key, which stays in the
// operator's directory), the join files (NAME-join), the cluster backup
// key alone (NAME-backup-key), the client certificate for applications
// (NAME-client-tls: its certificate and key must have been issued,
// ensureClientCert). Docs: docs/operator.md, Security.
func Secrets(ec *v1alpha1.EtcdCluster, c *cluster.Cluster) ([]*corev1.Secret, error) {
	certDir := c.CertDir()
	read := func(p string) ([]byte, error) {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		return b, nil
	}
	caCrt, err := read(filepath.Join(certDir, pki.CACert))
	if err != nil {
		return nil, err
	}
	backupKey, err := read(c.BackupAuthKeyPath())
	if err != nil {
		return nil, err
	}
	join := map[string][]byte{}
	// One more: the pod being added before its host is in the spec
	// (scale.go's growingFile).
	for i := range len(c.Spec.Agents) + 1 {
		b, err := os.ReadFile(bootstrap.JoinPath(c.Dir, PodName(ec, i)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		join[JoinKey(ec, i)] = b
	}
	// NAME-client-tls: the issued client of the certificate directory
	// (clienttls.go issues and renews it), with the cluster's ca.crt (the
	// bundle of both CAs while a rotation trusts both).
	crt, key := filepath.Join(certDir, pki.ClientsDir, clientCertName(ec)+".crt"), filepath.Join(certDir, pki.ClientsDir, clientCertName(ec)+".key")
	cl := map[string][]byte{"ca.crt": caCrt}
	for k, f := range map[string]string{"tls.crt": crt, "tls.key": key} {
		b, err := read(f)
		if err != nil {
			return nil, fmt.Errorf("client certificate for applications: %w", err)
		}
		cl[k] = b
	}
	return []*corev1.Secret{
		// The update replaces the data of a NAME-ca an older operator
		// wrote with the CA's key in it.
		Secret(ec, caSecret(ec), map[string][]byte{"ca.crt": caCrt}),
		Secret(ec, joinSecret(ec), join),
		Secret(ec, BackupKeySecret(ec), map[string][]byte{BackupKeyKey: bytes.TrimSpace(backupKey)}),
		Secret(ec, clientTLSSecret(ec), cl),
	}, nil
}

func (r *Reconciler) updateStatus(ctx context.Context, ec *v1alpha1.EtcdCluster, o Observed) error {
	ec.Status = StatusFrom(ec, ec.Status, o, time.Now())
	return r.Client.Status().Update(ctx, ec)
}
