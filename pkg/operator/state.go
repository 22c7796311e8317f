package operator

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/etcd-steward/steward/api/v1alpha1"
	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Files of a cluster's Steward directory that are the operator's own.
const (
	// uidFile names the EtcdCluster (by UID) the directory belongs to.
	uidFile = "operator-uid"
	// s3CredentialsFile and s3CAFile hold what the resource's Secrets
	// give (0600, in a 0700 directory), named by the spec.
	s3CredentialsFile = "secrets/s3-credentials"
	s3CAFile          = "secrets/s3-ca.pem"
)

// StateDir is the Steward directory of ec under the operator's state
// directory: STATE/NAMESPACE/NAME.
func StateDir(state string, ec *v1alpha1.EtcdCluster) string {
	return filepath.Join(state, ec.Namespace, ec.Name)
}

// dirOwner is the UID of the resource dir belongs to ("" when none yet).
func dirOwner(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, uidFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// claimDir makes dir the directory of the resource of this UID: a
// directory left by a deleted resource of the same name (another UID) is
// moved aside to DIR.UID-OLD (its CA, its join files and what its backups
// need stay readable), never deleted. It returns whether it moved one.
func claimDir(dir string, uid string) (moved string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, uidFile))
	switch {
	case err == nil && strings.TrimSpace(string(b)) == uid:
		return "", nil
	case err == nil:
		moved = dir + "." + strings.TrimSpace(string(b))
		if err := os.Rename(dir, moved); err != nil {
			return "", fmt.Errorf("move aside the directory of a deleted EtcdCluster: %w", err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return moved, err
	}
	return moved, atomicfile.WriteFile(filepath.Join(dir, uidFile), []byte(uid+"\n"), 0o600)
}

// InitOptions returns what bootstrap.Init writes ec's Steward directory
// with: one host per member pod, named as the pod and at its DNS name,
// the resource's version and S3 store (credentials and CA from the files
// the reconciler wrote: s3CredentialsFile, s3CAFile).
func InitOptions(ec *v1alpha1.EtcdCluster, domain, binaryStore string, s3CA bool) bootstrap.InitOptions {
	o := bootstrap.InitOptions{
		HostsOptions: spec.HostsOptions{
			Name: ec.Name, Version: ec.Spec.Version,
			ClientPort: ClientPort, PeerPort: PeerPort, AgentPort: AgentPort, PodHosts: true,
		},
		BinaryStore: binaryStore,
	}
	if domain == "" {
		domain = DefaultClusterDomain
	}
	// Applications reach the members through the client Service: the
	// members' server certificates carry its names.
	svc := clientService(ec)
	o.ServerNames = []string{svc, svc + "." + ec.Namespace, svc + "." + ec.Namespace + ".svc", svc + "." + ec.Namespace + ".svc." + domain}
	for i := range int(ec.Spec.Replicas) {
		o.Hosts = append(o.Hosts, spec.Host{Name: PodName(ec, i), Address: HostName(ec, i, domain)})
	}
	if b := ec.Spec.Backup; b != nil && b.S3 != nil {
		prefix := b.S3.Prefix
		if prefix == "" {
			prefix = ec.Namespace + "/" + ec.Name
		}
		o.S3 = &spec.S3{Endpoint: strings.TrimRight(b.S3.Endpoint, "/"), Bucket: b.S3.Bucket, Prefix: prefix,
			Region: b.S3.Region, CredentialsFile: s3CredentialsFile}
		if s3CA {
			o.S3.CAFile = s3CAFile
		}
	}
	return o
}

// Shape sets in s what the resource says beyond InitOptions: members
// named as their pods (NAME-I, data in members/NAME-I/data), the etcd
// settings, the backup schedule and retention, the recovery mode. It is
// idempotent: the reconciler applies it until the cluster first starts.
func Shape(s *spec.Cluster, ec *v1alpha1.EtcdCluster) {
	for i := range s.Members {
		m := &s.Members[i]
		m.Name = m.Agent
		m.DataDir = filepath.Join("members", m.Name, "data")
	}
	e := ec.Spec.Etcd
	s.Etcd.QuotaBackendBytes = e.QuotaBackendBytes
	s.Etcd.AutoCompactionMode, s.Etcd.AutoCompactionRetention = e.AutoCompactionMode, e.AutoCompactionRetention
	s.Etcd.SnapshotCount = uint64(max(e.SnapshotCount, 0))
	s.Etcd.HeartbeatIntervalMs, s.Etcd.ElectionTimeoutMs = int(e.HeartbeatIntervalMs), int(e.ElectionTimeoutMs)
	if b := ec.Spec.Backup; b != nil && b.Volume != nil {
		// backupvolume.go: the claim is mounted at DIR/backups of every
		// member pod, the spec's default store, shared by them.
		s.Backup.S3, s.Backup.Store, s.Backup.StoreShared, s.Backup.Continuous = nil, "", true, true
	}
	if b := ec.Spec.Backup; b != nil && (s.Backup.S3 != nil || b.Volume != nil) {
		if b.FullSchedule != "" {
			s.Backup.FullSchedule = b.FullSchedule
		}
		if b.DeltaMaxAgeMs != 0 {
			s.Backup.DeltaMaxAgeMs = int(b.DeltaMaxAgeMs)
		}
		// The hosts' spec reads 0 as its default; the resource's schema
		// writes its defaults (3, 24, 7), so an explicit 0 hourly or daily
		// keeps the hosts' default (docs/operator.md).
		r := b.Retention
		deref := func(p *int32) int {
			if p == nil {
				return 0
			}
			return int(*p)
		}
		if r.KeepLast != 0 || deref(r.KeepHourly) != 0 || deref(r.KeepDaily) != 0 {
			s.Backup.Retention = spec.Retention{KeepLast: int(r.KeepLast), KeepHourly: deref(r.KeepHourly), KeepDaily: deref(r.KeepDaily)}
		}
	}
	// The API's default is auto (the hosts' spec's, manual): the
	// operator recovers a quorum loss itself (recover.go).
	s.Recovery.Mode = "auto"
	if ec.Spec.Recovery.Mode != "" {
		s.Recovery.Mode = ec.Spec.Recovery.Mode
	}
	if ec.Spec.Recovery.GracePeriodSeconds != 0 {
		s.Recovery.GracePeriodSeconds = int(ec.Spec.Recovery.GracePeriodSeconds)
	}
	if b := ec.Spec.Backup; b != nil && b.Volume != nil {
		// The API refuses auto with a volume store (the operator cannot
		// read the claim: backupvolume.go); never auto here either.
		s.Recovery.Mode = "manual"
	}
}

// S3Credentials is the content of the credentials file the spec names,
// from the Secret's AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY. A Secret
// without them is refused, naming the Secret and the keys (never their
// values).
func S3Credentials(secretName string, data map[string][]byte) ([]byte, error) {
	var missing []string
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if len(data[k]) == 0 || strings.ContainsAny(string(data[k]), "\n\r") {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: Secret %s needs the keys %s (one line each)", ErrBadSecret, secretName, strings.Join(missing, " and "))
	}
	return []byte("AWS_ACCESS_KEY_ID=" + string(data["AWS_ACCESS_KEY_ID"]) + "\nAWS_SECRET_ACCESS_KEY=" + string(data["AWS_SECRET_ACCESS_KEY"]) + "\n"), nil
}

// ErrBadSecret refuses a Secret the resource names that lacks what it
// must hold.
var ErrBadSecret = errors.New("a Secret the EtcdCluster names is missing keys")

// writeSecretFile writes one of the directory's secrets (0600 in 0700).
func writeSecretFile(dir, rel string, b []byte) error {
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(p, b, 0o600)
}

// initDir writes ec's Steward directory through steward init's library
// path (bootstrap.Init: spec, CA, admin certificate, join files), then
// shapes the spec (Shape). A directory that holds a spec already is only
// shaped again while its cluster never started.
func initDir(ctx context.Context, dir string, ec *v1alpha1.EtcdCluster, o bootstrap.InitOptions, say progress.Func) (*cluster.Cluster, bool, error) {
	created := false
	if _, err := os.Stat(filepath.Join(dir, spec.FileName)); errors.Is(err, os.ErrNotExist) {
		o.JoinValidity = 7 * 24 * time.Hour
		if _, _, err := bootstrap.Init(ctx, dir, o, say); err != nil {
			return nil, false, err
		}
		created = true
	} else if err != nil {
		return nil, false, err
	}
	c, err := cluster.Open(dir)
	if err != nil {
		return nil, created, err
	}
	if id, _ := c.KnownClusterID(); id != "" {
		return c, created, nil
	}
	s := c.Spec.Clone()
	Shape(s, ec)
	if _, err := c.ValidateSpec(s); err != nil {
		return nil, created, err
	}
	if err := s.Save(c.SpecPath()); err != nil {
		return nil, created, err
	}
	c.Spec = s
	return c, created, nil
}
