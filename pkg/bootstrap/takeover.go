package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/plan"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/spec"
)

// TakeOverOptions configure TakeOver.
type TakeOverOptions struct {
	// PKIDir holds the admin credentials (ca.crt, client.crt, client.key;
	// ca.key too when this coordinator is to add hosts) and the cluster
	// backup key (backup-auth.key), which authenticates backup manifests.
	PKIDir string
	// S3 is the cluster's backup store, as this machine reaches it; or
	// StoreDir, a shared directory store.
	S3       *spec.S3
	StoreDir string
	// BinaryStore is this machine's binary store (default DIR/binaries).
	BinaryStore string
	// KeyFile is this machine's copy of the backup encryption key, when
	// backups are encrypted.
	KeyFile string
}

// TakeOver makes dir the coordinator of a multi-host cluster whose
// coordinator is lost: from the backup store it reads the newest copies of
// the spec and of every plan (each checked against the admin signature),
// writes them into dir with the admin credentials, and claims the next
// generation, so the old coordinator, should it come back, stops before
// its next step. `steward plan resume` then finishes a plan. A directory
// that holds another cluster's spec is refused; the same cluster's (the
// old coordinator taking over again) is allowed.
func TakeOver(ctx context.Context, dir string, o TakeOverOptions, say progress.Func) (*handover.TakeOver, error) {
	signer, err := handover.NewSigner(o.PKIDir)
	if err != nil {
		return nil, err
	}
	var store backup.Store
	switch {
	case o.S3 != nil:
		store, err = backup.NewS3Store(ctx, backup.S3Config{
			Endpoint: o.S3.Endpoint, Bucket: o.S3.Bucket, Prefix: o.S3.Prefix, Region: o.S3.Region,
			CredentialsFile: o.S3.CredentialsFile, CAFile: o.S3.CAFile,
		})
	case o.StoreDir != "":
		store, err = backup.NewLocalStore(o.StoreDir)
	default:
		return nil, errors.New("name the cluster's backup store (S3, or a shared directory): the copies of the spec and plans are there")
	}
	if err != nil {
		return nil, err
	}
	h := &handover.Coordinator{Store: store, Signer: signer, Dir: dir}
	specPath := filepath.Join(dir, spec.FileName)
	var existing *spec.Cluster
	if s, err := spec.Load(specPath); err == nil {
		existing = s
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Read and check before claiming anything: Take claims last.
	var s *spec.Cluster
	t, err := h.Take(ctx, func(b []byte) error {
		var err error
		if s, err = spec.Parse(b); err != nil {
			return fmt.Errorf("the spec copy does not parse: %w", err)
		}
		if existing != nil && existing.Token != s.Token {
			return fmt.Errorf("%s holds another cluster (%s, token %s); take over into an empty --dir", specPath, existing.Name, existing.Token)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// This machine's paths: its copy of the admin credentials, its store
	// settings, its binary store.
	s.TLS.CertDir = ""
	s.BinaryStore = o.BinaryStore
	if o.S3 != nil {
		s.Backup.S3 = o.S3
	} else {
		s.Backup.Store = o.StoreDir
	}
	if s.Backup.EncryptionKeyFile != "" {
		s.Backup.EncryptionKeyFile = o.KeyFile
		if o.KeyFile == "" {
			say.Say("warning: backups are encrypted: give this coordinator the key (backup.encryptionKeyFile in %s) before it takes or reads one", specPath)
		}
	}
	certDir := s.CertDir(dir)
	if filepath.Clean(certDir) != filepath.Clean(o.PKIDir) {
		if err := os.MkdirAll(certDir, 0o700); err != nil {
			return nil, err
		}
		for _, name := range []string{pki.CACert, pki.CAKey, pki.ClientCert, pki.ClientKey, pki.BackupAuthKey} {
			b, err := os.ReadFile(filepath.Join(o.PKIDir, name))
			if errors.Is(err, os.ErrNotExist) && name == pki.CAKey {
				say.Say("note: no CA key in %s: this coordinator cannot add hosts (%v)", o.PKIDir, progress.Hint{Kind: HintAddHost, Plain: "no host add"})
				continue
			}
			if errors.Is(err, os.ErrNotExist) && name == pki.BackupAuthKey {
				// Without it this coordinator would generate a new key at
				// its first backup command, and trust none of the backups.
				say.Say("warning: no cluster backup key (%s) in %s: copy the old coordinator's (or a host's DIR/pki/%s) into %s before any backup command, or the backups taken so far are not trusted",
					pki.BackupAuthKey, o.PKIDir, pki.BackupAuthKey, certDir)
				continue
			}
			if err != nil {
				return nil, err
			}
			if err := atomicfile.WriteFile(filepath.Join(certDir, name), b, 0o600); err != nil {
				return nil, err
			}
		}
	}
	st := plan.OpenStore(dir) // no mirror: these are the copies
	for _, p := range t.Plans {
		if err := st.Save(ctx, p); err != nil {
			return nil, err
		}
		what, _, _ := cluster.PlanKinds.Describe(p) // "upgrade plan ID (etcd FROM to TO)"
		say.Say("%s: %s", what, p.State)
	}
	if t.RecoveryJournal != nil {
		// A recovery the lost coordinator left unfinished: the next
		// `steward recover` here (or the automatic recovery) resumes it
		// from its seed instead of finding the seed quorate.
		if err := os.MkdirAll(filepath.Join(dir, "status"), 0o700); err != nil {
			return nil, err
		}
		if err := atomicfile.WriteFile(filepath.Join(dir, "status", "recovery.json"), t.RecoveryJournal, 0o600); err != nil {
			return nil, err
		}
		say.Say("a recovery is unfinished: its journal was copied from the store")
	}
	if err := s.Save(specPath); err != nil {
		return nil, err
	}
	prev := "none recorded"
	if t.Previous.Generation > 0 {
		prev = fmt.Sprintf("generation %d, %s:%s", t.Previous.Generation, t.Previous.Host, t.Previous.Dir)
	}
	say.Say("took over cluster %s as generation %d (previous coordinator: %s)", s.Name, t.Generation, prev)
	return t, nil
}
