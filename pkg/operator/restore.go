package operator

// spec.restoreFrom: a new EtcdCluster made from a backup instead of empty.
//
// The restore is the hosts' restore (pkg/restore.Run), run by the operator
// as the coordinator of the cluster's Steward directory once every member
// pod's agent answers and before any member has started: it picks the
// chain in the source store, fetches and verifies it, replays the deltas
// and bumps the revision in the operator's directory (prepare), has each
// pod's agent stage a data dir from that snapshot beside its member's
// (stage, through the member runtime seam), then commits them (commit:
// the agents move the staged dirs into place). The members then start as
// `steward up` starts a restored cluster: a new cluster ID, new member IDs,
// on a new timeline that the spec records and the cluster's own backups
// (spec.backup) carry.
//
// Invariants:
//   - no member starts before the restore committed: ensure calls
//     bootstrap.Up only once restoredFile exists, and the restore's own
//     marker (cluster.RestorePendingFile) keeps Up from starting members of
//     a commit the operator did not finish (a killed operator runs the
//     restore again, with Force: what the first put in place is moved
//     aside, never deleted);
//   - the source store is named in the spec only from the restore's commit
//     (which saves the spec it ran with) until the spec is saved again with
//     the cluster's own backup section, kept in ownBackupFile from before
//     the first attempt, and the marker is written; the source's backups
//     are never continuous (no pod writes into the source store);
//   - a backup that cannot be read or verified is reported in the Ready
//     condition (reason RestoreFailed) and an event; nothing starts;
//   - nothing read from the source store is trusted before it is
//     authenticated: the Secret restoreFrom.backupKeySecret names holds the
//     cluster backup key of the cluster that took the backup; before the
//     Steward directory is written (checkRestoreSource) the store is listed
//     under it, and a missing key or a store without a backup that
//     authenticates is refused (reason RestoreNotAuthenticated, event of
//     that reason) with nothing created. The key becomes the new cluster's
//     own (pki/backup-auth.key, written before bootstrap.Init, which keeps
//     it), so restore.Run authenticates every manifest and timeline record
//     as `steward restore` does on hosts, and no manifest without a MAC is
//     ever trusted (RestoreOptions).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Files of the restore from spec.restoreFrom.
const (
	// restoredFile records that the restore committed (the backup ID and
	// revision); written once, after the spec names the cluster's own
	// store again.
	restoredFile = "operator-restored"
	// restoreCredentialsFile and restoreCAFile hold what restoreFrom.s3's
	// Secrets give (0600).
	restoreCredentialsFile = "secrets/restore-s3-credentials"
	restoreCAFile          = "secrets/restore-s3-ca.pem"
	// ownBackupFile keeps the spec's own backup section while the spec
	// may name the restore's source (restore.Run's commit saves it so).
	ownBackupFile = "operator-restore-backup.json"
)

// ownBackup returns the backup section kept in ownBackupFile, writing cur
// there first when there is none.
func ownBackup(dir string, cur spec.Backup) (spec.Backup, error) {
	p := filepath.Join(dir, ownBackupFile)
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		if b, err = json.Marshal(cur); err != nil {
			return spec.Backup{}, err
		}
		return cur, atomicfile.WriteFile(p, b, 0o600)
	} else if err != nil {
		return spec.Backup{}, err
	}
	var own spec.Backup
	if err := json.Unmarshal(b, &own); err != nil {
		return spec.Backup{}, fmt.Errorf("%s: %w", p, err)
	}
	return own, nil
}

// ErrRestoreFailed wraps every failure of the restore from
// spec.restoreFrom: the status reports it as reason RestoreFailed.
var ErrRestoreFailed = errors.New("restore from spec.restoreFrom failed")

// RestoreSource is the S3 store of spec.restoreFrom as the hosts' spec
// names a backup store (credentials and CA in the files the reconciler
// writes from the Secrets). A prefix left empty is NAMESPACE/NAME, as for
// spec.backup.s3.
func RestoreSource(ec *v1alpha1.EtcdCluster, hasCA bool) (*spec.S3, error) {
	rf := ec.Spec.RestoreFrom
	if rf == nil {
		return nil, nil
	}
	if rf.S3 == nil {
		return nil, fmt.Errorf("%w: spec.restoreFrom.volume is not supported yet (the restore is prepared in the operator's pod, which cannot mount the claim): copy the claim's backup directory into an S3 bucket and give spec.restoreFrom.s3", ErrRestoreFailed)
	}
	prefix := rf.S3.Prefix
	if prefix == "" {
		prefix = ec.Namespace + "/" + ec.Name
	}
	s := &spec.S3{Endpoint: strings.TrimRight(rf.S3.Endpoint, "/"), Bucket: rf.S3.Bucket, Prefix: prefix,
		Region: rf.S3.Region, CredentialsFile: restoreCredentialsFile}
	if hasCA {
		s.CAFile = restoreCAFile
	}
	return s, nil
}

// RestoreOptions are pkg/restore's options for spec.restoreFrom: the
// newest point of the source store (or the newest at or before
// restoreFrom.revision), data dirs the pods may hold moved aside (a
// restore the operator runs again after it was killed), and a backup of
// another etcd cluster accepted: it is always another cluster's. Manifests
// are authenticated under the directory's cluster backup key, which is the
// source cluster's (restoreFrom.backupKeySecret, checkRestoreSource):
// unauthenticated ones are never trusted.
func RestoreOptions(ec *v1alpha1.EtcdCluster) restore.Options {
	o := restore.Options{Backup: "latest", Force: true, BumpRevision: restore.DefaultBumpRevision, AllowOtherCluster: true}
	if rf := ec.Spec.RestoreFrom; rf != nil {
		o.ToRevision = rf.Revision
	}
	return o
}

// ErrRestoreNotAuthenticated refuses a spec.restoreFrom whose backups
// cannot be authenticated: no restoreFrom.backupKeySecret, a Secret without
// the key, or a store with no backup that authenticates under it. The
// status reports it as reason RestoreNotAuthenticated.
var ErrRestoreNotAuthenticated = errors.New("the backups of spec.restoreFrom are not authenticated")

// restoreKey reads the source cluster's backup key from the Secret
// restoreFrom.backupKeySecret names.
func (r *Reconciler) restoreKey(ctx context.Context, ec *v1alpha1.EtcdCluster) (*backup.AuthKey, []byte, error) {
	name := ec.Spec.RestoreFrom.BackupKeySecret
	if name == "" {
		return nil, nil, fmt.Errorf("%w: spec.restoreFrom.backupKeySecret is not set: name a Secret whose key %s holds the cluster backup key of the cluster that took the backup (DIR/pki/%s on its coordinator, or its Secret NAME-backup-key in Kubernetes); restore into a new EtcdCluster with it",
			ErrRestoreNotAuthenticated, BackupKeyKey, BackupKeyKey)
	}
	var sec corev1.Secret
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ec.Namespace, Name: name}, &sec); err != nil {
		return nil, nil, fmt.Errorf("%w: spec.restoreFrom.backupKeySecret %s: %w", ErrRestoreNotAuthenticated, name, err)
	}
	k, err := BackupKeyFromSecret(name, sec.Data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: spec.restoreFrom.backupKeySecret: %w", ErrRestoreNotAuthenticated, err)
	}
	return k, append(bytes.TrimSpace(sec.Data[BackupKeyKey]), '\n'), nil
}

// checkRestoreSource runs before ec's Steward directory is written: it
// reads the source's backup key, writes the source store's credentials,
// lists the store under the key and refuses a store where no backup
// authenticates (ErrRestoreNotAuthenticated, naming what was ignored and
// why) or where there is none (ErrRestoreFailed). Then it installs the key
// as the directory's cluster backup key, which bootstrap.Init keeps.
func (r *Reconciler) checkRestoreSource(ctx context.Context, ec *v1alpha1.EtcdCluster, dir string) error {
	if _, err := RestoreSource(ec, false); err != nil {
		return err // a store kind not supported: said before the key
	}
	key, raw, err := r.restoreKey(ctx, ec)
	if err != nil {
		return err
	}
	hasCA, err := r.restoreFiles(ctx, ec, dir)
	if err != nil {
		return err
	}
	src, err := RestoreSource(ec, hasCA)
	if err != nil {
		return err
	}
	cfg := backup.S3Config{Endpoint: src.Endpoint, Bucket: src.Bucket, Prefix: src.Prefix, Region: src.Region,
		CredentialsFile: filepath.Join(dir, src.CredentialsFile)}
	if src.CAFile != "" {
		cfg.CAFile = filepath.Join(dir, src.CAFile)
	}
	where := storeName(src.Endpoint, src.Bucket, src.Prefix)
	store, err := backup.NewS3Store(ctx, cfg)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRestoreFailed, where, err)
	}
	l, err := backup.List(ctx, store, backup.ListOptions{Key: key})
	if err != nil {
		return fmt.Errorf("%w: list %s: %w", ErrRestoreFailed, where, err)
	}
	if err := SourceAuthenticated(l, where, ec.Spec.RestoreFrom.BackupKeySecret); err != nil {
		return err
	}
	pkiDir := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(pkiDir, pki.BackupAuthKey), raw, 0o600)
}

// SourceAuthenticated decides on the listing of the restore's source store
// under the source's key: some full backup authenticates, or the restore
// is refused. where names the store, secret the key's Secret.
func SourceAuthenticated(l backup.Listing, where, secret string) error {
	for _, m := range l.Backups {
		if m.Kind == backup.KindFull {
			return nil
		}
	}
	if len(l.Ignored) > 0 {
		return fmt.Errorf("%w: no full backup in %s authenticates under the cluster backup key of Secret %s (%d manifests ignored, the first %s): name the Secret with the key of the cluster that took these backups",
			ErrRestoreNotAuthenticated, where, secret, len(l.Ignored), l.Ignored[0])
	}
	return fmt.Errorf("%w: no full backup in %s", ErrRestoreFailed, where)
}

// restored reports whether the restore of dir committed.
func restored(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, restoredFile))
	return err == nil
}

// restoreFiles writes the restore source's credentials and CA from
// restoreFrom.s3's Secrets; it returns whether there is a CA.
func (r *Reconciler) restoreFiles(ctx context.Context, ec *v1alpha1.EtcdCluster, dir string) (bool, error) {
	s3 := ec.Spec.RestoreFrom.S3
	if s3 == nil {
		return false, nil
	}
	hasCA, err := r.writeS3Secrets(ctx, ec.Namespace, "spec.restoreFrom.s3", s3, dir, restoreCredentialsFile, restoreCAFile)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrRestoreFailed, err)
	}
	return hasCA, nil
}

// restoreFrom restores c's members from spec.restoreFrom before they first
// start (see the file's comment). It returns the cluster as its spec now
// is.
func (r *Reconciler) restoreFrom(ctx context.Context, ec *v1alpha1.EtcdCluster, c *cluster.Cluster, say progress.Func) (*cluster.Cluster, error) {
	hasCA, err := r.restoreFiles(ctx, ec, c.Dir)
	if err != nil {
		return nil, err
	}
	src, err := RestoreSource(ec, hasCA)
	if err != nil {
		return nil, err
	}
	r.setOp(ec, "Restore", "Running", fmt.Sprintf("restoring from %s/%s/%s", src.Endpoint, src.Bucket, src.Prefix))
	r.event(ec, corev1.EventTypeNormal, "Restoring", "Restore", "restoring the members from the backups in %s/%s/%s", src.Endpoint, src.Bucket, src.Prefix)
	// The pods' agents stage and commit data dirs only for members they
	// know: hand each its member's config first, without starting it (as
	// bootstrap.Up hands them before it starts them).
	for _, m := range c.Spec.Members {
		rt, err := c.Runtime(m.Agent)
		if err != nil {
			return nil, err
		}
		if _, err := rt.PutMember(ctx, c.MemberConfig(m)); err != nil {
			return nil, fmt.Errorf("configure member %s on its pod's agent before the restore: %w", m.Name, err)
		}
	}
	rc, err := cluster.Open(c.Dir)
	if err != nil {
		return nil, err
	}
	// The cluster's own backup section, kept in a file before the first
	// attempt: an operator killed between the commit (which saves the
	// spec naming the source) and the save below reads it from there.
	own, err := ownBackup(c.Dir, rc.Spec.Backup)
	if err != nil {
		return nil, err
	}
	// The source store, in memory only: prepare reads it, and the commit
	// saves the spec with it, put back below.
	s := rc.Spec.Clone()
	s.Backup.S3, s.Backup.Continuous, s.Backup.EncryptionKeyFile = src, false, ""
	rc.Spec = s
	var lines []string
	rc.Progress = func(format string, args ...any) {
		lines = append(lines, fmt.Sprintf(format, args...))
		say(format, args...)
	}
	m, err := restore.Run(ctx, rc, RestoreOptions(ec))
	if errors.Is(err, restore.ErrUntrustedManifests) {
		return nil, fmt.Errorf("%w: %w", ErrRestoreNotAuthenticated, err)
	} else if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRestoreFailed, err)
	}
	after, err := cluster.Open(c.Dir)
	if err != nil {
		return nil, err
	}
	after.Progress = say
	next := after.Spec.Clone()
	next.Backup = own
	if err := after.SaveSpec(ctx, next); err != nil {
		return nil, fmt.Errorf("name the cluster's own backup store in its spec again after the restore: %w", err)
	}
	last := ""
	if len(lines) > 0 {
		last = lines[len(lines)-1]
	}
	if err := atomicfile.WriteFile(filepath.Join(c.Dir, restoredFile), []byte(fmt.Sprintf("backup %s\n%s\n", m.ID, last)), 0o600); err != nil {
		return nil, err
	}
	tl := int64(0)
	if after.Spec.Timeline != nil {
		tl = after.Spec.Timeline.ID
	}
	r.event(ec, corev1.EventTypeNormal, "Restored", "Restore", "restored every member from full backup %s (etcd cluster %s, revision %d) and the deltas after it, on timeline %d", m.ID, m.ClusterID, m.EndRevision, tl)
	r.setOp(ec, "Restore", "Succeeded", fmt.Sprintf("restored from backup %s on timeline %d; starting the members", m.ID, tl))
	return after, nil
}
