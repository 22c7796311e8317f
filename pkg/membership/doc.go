// Package membership changes who is in the cluster and who leads it: add
// (as a learner, promoted once caught up), remove, replace a member whose
// data is lost, stop and start a member's process, and move the leader.
// Every change is guarded by the health of the rest of the cluster and
// undoes itself on failure.
package membership
