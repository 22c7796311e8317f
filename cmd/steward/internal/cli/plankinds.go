package cli

// The packages of the plan kinds, one line per package: each registers
// its kinds in cluster.PlanKinds as it initialises (plan.KindSpec), and
// every command reaches this package, so every command (and the status
// conditions it computes) knows every kind. A new kind's package gets a
// line here (docs/ARCHITECTURE.md, "Adding a plan kind").
import (
	_ "github.com/etcd-steward/steward/pkg/adopt"       // adopt, adopt-undo, certs-take-over
	_ "github.com/etcd-steward/steward/pkg/carotate"    // ca-rotation, ca-rotation-rollback
	_ "github.com/etcd-steward/steward/pkg/kubeupgrade" // kube-upgrade, kube-rollback
	_ "github.com/etcd-steward/steward/pkg/upgrade"     // upgrade, rollback
)
