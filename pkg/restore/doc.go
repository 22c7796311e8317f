// Package restore is the way back from backups: restoring a cluster's data
// dirs from a full backup and its deltas (prepare, stage, commit), to the
// newest revision or an earlier one, and the work on the backup store that
// serves it: listing, verifying and garbage collection under the spec's
// retention.
package restore
