// Package restore is the way back from backups: restoring a cluster's data
// dirs from a full backup and its deltas (prepare, stage, commit), to the
// newest revision or an earlier one, and the work on the backup store that
// serves it: listing, verifying and garbage collection under the spec's
// retention.
//
// Invariant: the restored members' etcd starts on what a restore builds. A
// database whose storage version is one minor newer than the oldest of
// them (a backup the newer minor took before a rollback) is lowered as
// etcd's downgrade lowers it; two minors newer is refused in prepare,
// before anything outside its temporary dir changes (storageversion.go).
package restore
