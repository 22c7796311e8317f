package pki

import (
	"errors"
	"os"
	"path/filepath"
)

// Files of a CA rotation (pkg/certs: RotationPrepare ... RotationDrop), beside ca.crt
// and ca.key in the certificate directory.
const (
	// CANextCert and CANextKey are the new CA while the rotation runs.
	CANextCert = "ca-next.crt"
	CANextKey  = "ca-next.key"
	// CACross is the new CA's certificate signed by the old CA: served
	// after every leaf the new CA issues, so a peer that trusts only the
	// old CA (a client, a member that loaded its CA pool at start) still
	// verifies it.
	CACross = "ca-cross.crt"
	// CAOldCert and CAOldKey keep the old CA once the new one replaced it
	// (never deleted by Steward).
	CAOldCert = "ca-old.crt"
	CAOldKey  = "ca-old.key"
)

// ErrRotationInProgress: leaves cannot be renewed or issued while a CA
// rotation runs (its plan reissues them); the plan is finished first (the
// command says how: cli.LibraryAdvice).
var ErrRotationInProgress = errors.New("a CA rotation is in progress (" + CANextCert + " exists)")

// RotationInProgress reports whether dir holds the next CA of a rotation
// that has not dropped the old one yet.
func RotationInProgress(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, CANextCert))
	return err == nil
}

// AbortedSuffix prefixes the suffix the next CA's files are moved aside
// with by pkg/certs.RollbackRetire (ca-next.crt.aborted-SERIAL).
const AbortedSuffix = ".aborted-"
