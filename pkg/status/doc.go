// Package status is what a cluster's members, plans, backups and
// certificates report: the Status (Get: every member probed, every agent
// asked, in parallel, each within cluster.ProbeTimeout; LiveMembers
// without the conditions), its conditions (conditions.go: Ready,
// AllMembersReady, BackupReady, the plan kinds' conditions,
// CertificatesReady, BinariesInStep, CertificateRenewal) and the files
// under DIR/status it reads and writes: conditions.json (Record, the one
// write of an observation, by `steward status`), the certificate renewal
// loop's state (renewer.go) and the automatic recovery's
// (autorecovery.go). It also holds the waits built on a status (wait.go:
// a member healthy, quorum, the whole cluster, a member caught up after a
// restart) and the status of a stopped cluster (stopped.go).
//
// Every function takes the cluster handle (*cluster.Cluster); the handle
// itself knows nothing of status. Its JSON field names are stable
// (docs/cli.md).
package status
