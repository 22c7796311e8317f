package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// The host's copy of the cluster spec: a coordinator on another machine
// hands it over (SetCluster) so the daemons beside the agent, which open
// the spec of the agent's directory (the continuous backup loop), run on
// this host too.

// Secret files SetCluster writes, relative to the agent's directory.
const (
	secretsDir        = "secrets"
	s3CredentialsFile = "secrets/s3-credentials"
	backupKeyFile     = "secrets/backup.key"
	s3CAFile          = "secrets/s3-ca.pem"
)

// ErrOtherBackupAuthKey: a spec hand-over carries another cluster backup
// key than the one this host holds.
var ErrOtherBackupAuthKey = errors.New("another cluster backup key")

// ErrNotJoined refuses a spec handed to an agent that did not join a
// cluster (this machine's own, whose spec is the coordinator's); the
// command names how a host joins (cli.LibraryAdvice).
var ErrNotJoined = errors.New("only an agent that joined a cluster keeps a copy of the spec")

// SetCluster writes the spec a coordinator sent into the agent's directory
// (DIR/cluster.yaml), with this host's paths: its binary store, its
// certificate directory, and its copies of the secret files (0600). A
// spec that does not parse, or whose name or token is not this cluster's
// (when the host joined one), is refused and changes nothing.
func (a *Agent) SetCluster(f agentapi.ClusterFiles) error {
	if a.opts.ClusterToken == "" {
		// This machine's own agent: the spec here is the coordinator's.
		return badRequest{ErrNotJoined}
	}
	s, err := spec.Parse([]byte(f.Spec))
	if err != nil {
		return badRequest{fmt.Errorf("cluster spec does not parse: %w", err)}
	}
	if s.Token != a.opts.ClusterToken {
		return badRequest{fmt.Errorf("the spec is of cluster %s (token %s); this agent joined the cluster of token %s", s.Name, s.Token, a.opts.ClusterToken)}
	}
	if _, ok := s.Agent(a.opts.Name); !ok {
		return badRequest{fmt.Errorf("the spec has no agent %s (this agent)", a.opts.Name)}
	}
	s.BinaryStore = a.opts.BinaryStore
	s.TLS.CertDir = "pki"
	if s3 := s.Backup.S3; s3 != nil {
		s3.CredentialsFile = ""
		if f.S3Credentials != "" {
			s3.CredentialsFile = s3CredentialsFile
		}
		// A private CA for the S3 server comes with the spec, checked
		// here (PEM certificates only); a spec naming one without it
		// (a coordinator that does not send it) is refused rather than
		// leaving this host on its system roots.
		switch {
		case s3.CAFile != "" && f.S3CA == "":
			return badRequest{fmt.Errorf("the spec names backup.s3.caFile %s but its content was not sent: this host would check the S3 server against its system roots; hand the spec over from a coordinator of this agent's version or newer", s3.CAFile)}
		case f.S3CA != "":
			if _, err := backup.ParseCABundle([]byte(f.S3CA)); err != nil {
				return badRequest{fmt.Errorf("the S3 CA bundle sent with the spec (backup.s3.caFile %s): %w", s3.CAFile, err)}
			}
			s3.CAFile = s3CAFile
		}
	} else if f.S3CA != "" {
		return badRequest{errors.New("an S3 CA bundle was sent with a spec that has no backup.s3")}
	}
	s.Backup.EncryptionKeyFile = ""
	if f.BackupKey != "" {
		s.Backup.EncryptionKeyFile = backupKeyFile
	}
	if err := os.MkdirAll(filepath.Join(a.opts.Dir, secretsDir), 0o700); err != nil {
		return err
	}
	authPath := filepath.Join(a.opts.Dir, "pki", pki.BackupAuthKey)
	if f.BackupAuthKey != "" {
		// A coordinator that lost the cluster backup key (a takeover
		// without it) would make one of its own: replacing this host's
		// copy would lose the key every earlier manifest is sealed under,
		// maybe its last copy. Refused before anything is written.
		if have, err := os.ReadFile(authPath); err == nil && !bytes.Equal(bytes.TrimSpace(have), bytes.TrimSpace([]byte(f.BackupAuthKey))) {
			return badRequest{fmt.Errorf("%w: this host holds another cluster backup key (%s) than the coordinator sends: copy this host's key to the coordinator's DIR/pki/%s instead of making a new one", ErrOtherBackupAuthKey, authPath, pki.BackupAuthKey)}
		}
	}
	for _, sf := range []struct {
		path, data string
		keep       bool // a key earlier backups may need: moved aside, never deleted
	}{{s3CredentialsFile, f.S3Credentials, false}, {s3CAFile, f.S3CA, false}, {backupKeyFile, f.BackupKey, true}} {
		p := filepath.Join(a.opts.Dir, sf.path)
		if sf.keep {
			if have, err := os.ReadFile(p); err == nil && string(have) != sf.data {
				aside := fmt.Sprintf("%s.replaced-%s", p, time.Now().UTC().Format("20060102T150405.000000000Z"))
				if err := os.Rename(p, aside); err != nil {
					return fmt.Errorf("keep the previous %s: %w", sf.path, err)
				}
			}
		}
		if sf.data == "" {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			continue
		}
		if err := atomicfile.WriteFile(p, []byte(sf.data), 0o600); err != nil {
			return fmt.Errorf("write %s: %w", sf.path, err)
		}
	}
	if f.BackupAuthKey != "" {
		// The cluster backup key lives beside the host's certificates,
		// where its join file put it.
		if err := os.MkdirAll(filepath.Join(a.opts.Dir, "pki"), 0o700); err != nil {
			return err
		}
		if err := atomicfile.WriteFile(authPath, []byte(f.BackupAuthKey), 0o600); err != nil {
			return fmt.Errorf("write the cluster backup key: %w", err)
		}
	}
	// The spec last: the daemons never see it before its secrets.
	if err := s.Save(filepath.Join(a.opts.Dir, spec.FileName)); err != nil {
		return fmt.Errorf("write the cluster spec: %w", err)
	}
	return nil
}

// BackupStatuses returns the backup loop reports in the agent's status
// directory, as written.
func (a *Agent) BackupStatuses() []json.RawMessage {
	files, _ := filepath.Glob(filepath.Join(a.opts.Dir, "status", "backup-*.json"))
	out := []json.RawMessage{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && json.Valid(b) {
			out = append(out, b)
		}
	}
	return out
}
