// Package memberlease is the member side and the reading of DEP-01's member
// leases: one Kubernetes Lease per member (NAMESPACE/NAME, the member's pod
// name), created and deleted by the operator only, renewed by the member's
// own agent while its member is started, a voting member and healthy, with
// spec.holderIdentity "MEMBERIDHEX:Leader" or "MEMBERIDHEX:Member".
//
// It holds three things and nothing of a cluster:
//   - Renewer (renewer.go): the agent's loop that renews one lease every
//     leaseDurationSeconds/3 while a health function says so, and leaves
//     it to expire otherwise;
//   - ParseHolder: the holderIdentity as the API server hands it back
//     (fuzzed: FuzzParseHolder);
//   - Readiness (readiness.go): DEP-01's member readiness, a pure function
//     of the pod's readiness, the lease and the time, for the operator's
//     status.members.
//
// Invariants enforced here: a Renewer never creates or deletes a lease
// (only Get and Update: renewLease), and writes only holderIdentity,
// renewTime and, when the holder changes, acquireTime and leaseTransitions;
// a holderIdentity is written only from a Holder whose String parses back
// to itself.
package memberlease

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Role is a voting member's role in a holderIdentity.
type Role string

// The roles DEP-01 names. A learner is not healthy for a lease: its lease
// is not renewed, so it has no role here.
const (
	RoleLeader Role = "Leader"
	RoleMember Role = "Member"
)

// Holder is what a member's agent writes in its lease's holderIdentity.
type Holder struct {
	// ID is etcd's member ID (never 0).
	ID   uint64
	Role Role
}

// String is the holderIdentity: the member ID in lower-case hex, as etcd
// and Steward's status print it, a colon and the role ("8e9e05c52164694d:Leader").
func (h Holder) String() string { return fmt.Sprintf("%x:%s", h.ID, h.Role) }

// IDHex is the member ID in hex, as status.members[].id holds it.
func (h Holder) IDHex() string { return fmt.Sprintf("%x", h.ID) }

// ErrNoHolder is the holderIdentity of a lease no agent renewed yet (the
// operator creates leases with none).
var ErrNoHolder = errors.New("the lease has no holder yet")

// ErrBadHolder is a holderIdentity that is not MEMBERIDHEX:Leader or
// MEMBERIDHEX:Member.
var ErrBadHolder = errors.New("holderIdentity is not MEMBERIDHEX:Leader or MEMBERIDHEX:Member")

// maxHolder bounds what is looked at of a holderIdentity: the longest good
// one is 16 hex digits, a colon and "Leader".
const maxHolder = 64

// ParseHolder reads a lease's holderIdentity. It comes from the API
// server, so it may be anything: empty is ErrNoHolder; anything but 1 to
// 16 hex digits of a non-zero ID, one colon and exactly Leader or Member
// is ErrBadHolder, naming what is wrong.
func ParseHolder(s string) (Holder, error) {
	if s == "" {
		return Holder{}, ErrNoHolder
	}
	if len(s) > maxHolder {
		return Holder{}, fmt.Errorf("%w: %d bytes long", ErrBadHolder, len(s))
	}
	id, role, ok := strings.Cut(s, ":")
	if !ok {
		return Holder{}, fmt.Errorf("%w: %q has no colon", ErrBadHolder, s)
	}
	if id == "" || len(id) > 16 {
		return Holder{}, fmt.Errorf("%w: member ID %q is not 1 to 16 hex digits", ErrBadHolder, id)
	}
	for _, c := range id {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return Holder{}, fmt.Errorf("%w: member ID %q is not hex", ErrBadHolder, id)
		}
	}
	n, err := strconv.ParseUint(id, 16, 64)
	if err != nil {
		return Holder{}, fmt.Errorf("%w: member ID %q: %v", ErrBadHolder, id, err)
	}
	if n == 0 {
		return Holder{}, fmt.Errorf("%w: member ID 0", ErrBadHolder)
	}
	switch r := Role(role); r {
	case RoleLeader, RoleMember:
		return Holder{ID: n, Role: r}, nil
	}
	return Holder{}, fmt.Errorf("%w: role %q is neither Leader nor Member", ErrBadHolder, role)
}

// Ref names a lease.
type Ref struct{ Namespace, Name string }

func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// ErrBadRef is a lease reference that is not NAMESPACE/NAME.
var ErrBadRef = errors.New("a lease is named NAMESPACE/NAME")

// ParseRef reads NAMESPACE/NAME; both must be DNS labels or subdomains as
// Kubernetes names them (lower-case letters, digits, '-' and '.').
func ParseRef(s string) (Ref, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || strings.Contains(name, "/") {
		return Ref{}, fmt.Errorf("%w: %q", ErrBadRef, s)
	}
	r := Ref{Namespace: ns, Name: name}
	if err := r.check(); err != nil {
		return Ref{}, err
	}
	return r, nil
}

// The environment variables a member pod gets from the downward API
// (metadata.namespace, metadata.name): its lease has the pod's name.
const (
	EnvNamespace = "POD_NAMESPACE"
	EnvName      = "POD_NAME"
)

// RefFromEnv is the lease of the pod the process runs in: POD_NAMESPACE/
// POD_NAME from getenv (os.Getenv), both required.
func RefFromEnv(getenv func(string) string) (Ref, error) {
	r := Ref{Namespace: getenv(EnvNamespace), Name: getenv(EnvName)}
	var missing []string
	for _, v := range []struct{ env, val string }{{EnvNamespace, r.Namespace}, {EnvName, r.Name}} {
		if v.val == "" {
			missing = append(missing, v.env)
		}
	}
	if len(missing) > 0 {
		return Ref{}, fmt.Errorf("%w: %s not set (a member pod sets them from the downward API: metadata.namespace, metadata.name)", ErrBadRef, strings.Join(missing, " and "))
	}
	if err := r.check(); err != nil {
		return Ref{}, err
	}
	return r, nil
}

func (r Ref) check() error {
	for _, p := range []struct{ what, v string }{{"namespace", r.Namespace}, {"name", r.Name}} {
		if p.v == "" || len(p.v) > 253 {
			return fmt.Errorf("%w: the %s %q must be 1 to 253 characters", ErrBadRef, p.what, p.v)
		}
		for i, c := range p.v {
			ok := 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || (c == '-' || c == '.') && i > 0 && i < len(p.v)-1
			if !ok {
				return fmt.Errorf("%w: the %s %q may hold only lower-case letters, digits, and '-' or '.' inside", ErrBadRef, p.what, p.v)
			}
		}
	}
	return nil
}
