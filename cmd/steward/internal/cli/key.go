package cli

import "github.com/etcd-steward/steward/pkg/backup"

// KeyHint adds the --key-file advice to the error of reading an encrypted
// backup without a key (backup.ErrNeedKey), for the commands that have
// the flag (restore, backup verify, inspect storage-versions).
func KeyHint(err error) error {
	return Hint(err, backup.ErrNeedKey, "give its key with --key-file")
}
