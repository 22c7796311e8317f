// Package operator is Steward's Kubernetes operator: a controller-runtime
// manager whose EtcdCluster reconciler is the coordinator of one
// multi-host Steward cluster per resource, every member pod one of its
// hosts (docs/operator.md). It sits above the operations, as the commands
// do: it drives pkg/bootstrap (init's library path, up) and pkg/status
// against the pods' agents, and builds the Kubernetes objects the members
// run in.
//
// For an EtcdCluster NAME in NAMESPACE it keeps:
//   - a Steward directory, STATE/NAMESPACE/NAME (Config.StateDir): the
//     spec (hosts = the pods' DNS names NAME-I.NAME-peer.NAMESPACE.svc.DOMAIN,
//     members NAME-I), the CA and the admin certificate, the join files,
//     the S3 credentials read from the resource's Secret (secrets/, 0600,
//     never logged), the status files;
//   - Secrets NAME-ca (the CA certificate, ca.crt), NAME-join (one key
//     per pod, NAME-I.yaml), NAME-backup-key (the cluster backup key
//     alone), NAME-client-tls; Services NAME-peer (headless, publishing pods that
//     are not ready) and NAME-client; the StatefulSet NAME; the
//     PodDisruptionBudget NAME; the ServiceAccount NAME-member with a Role
//     on its cluster's Leases.
//
// Invariants:
//   - Every object it makes carries an owner reference to its EtcdCluster
//     (objects.go: owned), so deleting the resource deletes them through
//     Kubernetes' garbage collector; no finalizer is needed. The
//     StatefulSet's PersistentVolumeClaims are kept (its default retention
//     policy, Retain) and so are the backups; the Steward directory of a
//     deleted resource is moved aside, not deleted, when a new resource
//     of the same name appears (state.go: a directory belongs to one UID).
//   - `up` runs once per directory, after every pod's agent answered; once
//     the cluster ID is recorded the reconciler only reports, so a restart
//     of the operator never bootstraps a cluster twice.
//   - It never adopts an object it did not make (claims.go: an existing
//     object without this UID's controller reference is refused, unchanged)
//     nor starts members over claims a deleted resource of the same name
//     left (claims.go: StaleClaims).
//   - What runs per resource beside the reconciles (its coordinator
//     process, its version plan's goroutine) is keyed by its UID and ends
//     with it: stopped and waited for when the resource is deleted or
//     replaced by one of another UID, and when the operator stops
//     (lifecycle.go). Up to MaxConcurrentReconciles resources are
//     reconciled at once, one reconcile per resource at a time.
//   - The S3 credentials are read from the Secret into a file of the state
//     directory only; they appear in no log, Event or status.
//   - NAME-client-tls is renewed, with a new key, at the renewal point
//     every leaf follows, and issued again when it expired or cannot be
//     used; the pair it replaces stays on disk until the Secret holds the
//     new one (clienttls.go).
//   - The CA's key never leaves the state directory: no Secret holds it
//     (reconcile.go, Secrets). A Secret holds what its readers need and no
//     more (docs/operator.md, Security).
//   - The manager caches only the objects the operator made of the kinds
//     it watches; the users' Secrets and the kinds it does not watch are
//     read uncached (manager.go, cacheOptions), and the ClusterRole grants
//     no more than that (reconcile.go's RBAC markers).
//   - Nothing read from a restore's source store is trusted before it is
//     authenticated under restoreFrom.backupKeySecret (restore.go).
//   - A backup claim (spec.backup.volume) is the user's: mounted by every
//     member pod, never created, resized or deleted, and refused when the
//     members cannot all mount it (backupvolume.go). The user's CA
//     (spec.tls.caSecret) is checked before anything is written and never
//     replaced under a running cluster (usertls.go).
package operator
