package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-steward/steward/internal/atomicfile"
	"github.com/etcd-steward/steward/internal/proc"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// NeedsRenewer reports whether this machine needs a renewal process of its
// own: it is the coordinator of a multi-host cluster (its certificate
// directory holds the CA key, the spec places agents on other hosts, TLS
// is on) and no agent runs here (no member on agent "local"), so no
// agent's renewal loop would sign the hosts' leaves. Only the coordinator
// can sign them: the CA key never leaves it.
func NeedsRenewer(c *cluster.Cluster) bool {
	if c.Spec.TLS.Disabled || !c.Spec.MultiHost() || c.Spec.Uses(spec.LocalAgent) {
		return false
	}
	_, err := os.Stat(filepath.Join(c.CertDir(), pki.CAKey))
	return err == nil
}

// RenewalStateFile is the file, under DIR/status, in which the certificate
// renewal loop of a directory (an agent's, or `steward certs renew
// --watch`) records that it is alive and what it did (RenewalState).
const RenewalStateFile = "certrenew.json"

// RenewalStatePath is the renewal loop's state file of the Steward
// directory dir.
func RenewalStatePath(dir string) string {
	return filepath.Join(dir, "status", RenewalStateFile)
}

// RenewalState is what the certificate renewal loop of a directory records
// (RenewalStatePath, written atomically at every heartbeat and round). Its
// JSON field names are stable: `steward status -o json` shows them under
// certificateRenewal (docs/cli.md).
type RenewalState struct {
	// PID is the process running the loop: the agent, or `steward certs
	// renew --watch`.
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"startedAt"`
	// Heartbeat is when the loop last said it is alive (every
	// RenewalHeartbeat, also in the middle of a long round).
	Heartbeat time.Time `json:"heartbeat"`
	// LastRound is when the loop last finished a round (renewed what was
	// due, or found nothing due).
	LastRound time.Time `json:"lastRound,omitzero"`
	// LastRenewal is when the loop last renewed a certificate, and
	// LastRenewed which ones (HOST/NAME for a joined host's).
	LastRenewal time.Time `json:"lastRenewal,omitzero"`
	LastRenewed []string  `json:"lastRenewed,omitempty"`
	// NextRenewal is the earliest renewal point of this directory's
	// leaves (a joined host's are read at each round from its agent and
	// not included).
	NextRenewal time.Time `json:"nextRenewal,omitzero"`
	// LastError is the last round's problem; empty when it went well.
	LastError string `json:"lastError,omitempty"`
	// StoppedAt is set when the loop stopped by request (SIGTERM, `steward
	// down`, the agent stopping).
	StoppedAt time.Time `json:"stoppedAt,omitzero"`
}

// RenewalHeartbeat is how often a renewal loop records its heartbeat;
// RenewalStale how old a heartbeat may be before status reports the loop
// as not responding.
const (
	RenewalHeartbeat = 5 * time.Second
	RenewalStale     = 30 * time.Second
)

// WriteRenewalState records st in the state file of dir, atomically (0600).
func WriteRenewalState(dir string, st RenewalState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "status"), 0o700); err != nil {
		return fmt.Errorf("record the certificate renewal's state: %w", err)
	}
	if err := atomicfile.WriteFile(RenewalStatePath(dir), b, 0o600); err != nil {
		return fmt.Errorf("record the certificate renewal's state: %w", err)
	}
	return nil
}

// RenewalStatus is the certificate renewal of this directory as `steward
// status` sees it: the loop's recorded state and whether it runs.
type RenewalStatus struct {
	// Running is true when the recorded process is alive, did not stop,
	// and its heartbeat is fresher than RenewalStale.
	Running bool `json:"running"`
	// Process says who must run the loop here: "agent" (this machine's
	// agent runs members and the loop beside them) or "certs renew
	// --watch" (the coordinator of a multi-host cluster without a local
	// agent: a process of its own, started by `steward up` or systemd).
	Process string `json:"process"`
	// Log is the renewal process's log file (only for "certs renew --watch").
	Log string `json:"log,omitempty"`
	RenewalState
}

// CondCertificateRenewal is True while this directory's certificate
// renewal loop runs (its heartbeat is fresh), False when it is gone, has
// stopped or does not respond, Unknown when it never reported.
const CondCertificateRenewal = "CertificateRenewal"

// Renewal reads this directory's certificate renewal state, with who
// must run the loop here (Process, Log); PID is 0 when no loop ever
// recorded one. Running is computed at now.
func Renewal(c *cluster.Cluster, now time.Time) (*RenewalStatus, error) {
	rs := &RenewalStatus{Process: "agent"}
	if NeedsRenewer(c) {
		rs.Process = "certs renew --watch"
		rs.Log = filepath.Join(c.Dir, "logs", "certrenew.log")
	}
	b, err := os.ReadFile(RenewalStatePath(c.Dir))
	if errors.Is(err, fs.ErrNotExist) {
		return rs, nil
	}
	if err != nil {
		return rs, fmt.Errorf("read the certificate renewal's state: %w", err)
	}
	if err := json.Unmarshal(b, &rs.RenewalState); err != nil {
		return rs, fmt.Errorf("read the certificate renewal's state %s: %w", RenewalStatePath(c.Dir), err)
	}
	rs.Running = rs.StoppedAt.IsZero() && proc.Alive(rs.PID) && now.Sub(rs.Heartbeat) <= RenewalStale
	return rs, nil
}

// renewalCondition computes CondCertificateRenewal from what Renewal
// read (rs) and its error, at now. alive says whether rs.PID runs.
func renewalCondition(rs *RenewalStatus, err error, alive bool, now time.Time) Condition {
	cond := Condition{Type: CondCertificateRenewal}
	// What restarts the renewal: the command adds how (Fix).
	restart, fix := "", FixRenewerStart
	if rs.Process == "agent" {
		restart, fix = "; it runs in this machine's agent: start the agent", FixAgentStart
	}
	ago := func(t time.Time) string { return now.Sub(t).Round(time.Second).String() + " ago" }
	switch {
	case err != nil:
		cond.Status, cond.Reason, cond.Message = "Unknown", "StateUnreadable", err.Error()
	case rs.PID == 0 && rs.Process == "agent":
		cond.Status, cond.Reason = "Unknown", "NotReported"
		cond.Message = "the agent's certificate renewal loop has not reported yet"
	case rs.PID == 0:
		cond.Status, cond.Reason, cond.Fix = "False", "NotRunning", fix
		cond.Message = "no certificate renewal runs for this directory: the hosts' certificates are not renewed" + restart
	case !rs.StoppedAt.IsZero():
		cond.Status, cond.Reason, cond.Fix = "False", "Stopped", fix
		cond.Message = fmt.Sprintf("the certificate renewal (pid %d) stopped %s%s", rs.PID, ago(rs.StoppedAt), restart)
	case !alive:
		cond.Status, cond.Reason, cond.Fix = "False", "NotRunning", fix
		cond.Message = fmt.Sprintf("the certificate renewal (pid %d) is gone, last heartbeat %s: certificates are not renewed%s", rs.PID, ago(rs.Heartbeat), restart)
	case now.Sub(rs.Heartbeat) > RenewalStale:
		cond.Status, cond.Reason = "False", "NotResponding"
		cond.Message = fmt.Sprintf("the certificate renewal (pid %d) last reported %s (every %s expected)", rs.PID, ago(rs.Heartbeat), RenewalHeartbeat)
	default:
		cond.Status, cond.Reason = "True", "Running"
		cond.Message = fmt.Sprintf("pid %d, heartbeat %s", rs.PID, ago(rs.Heartbeat))
		if !rs.LastRenewal.IsZero() {
			cond.Message += fmt.Sprintf(", last renewal %s", ago(rs.LastRenewal))
		}
		if !rs.NextRenewal.IsZero() {
			cond.Message += fmt.Sprintf(", next renewal point %s", rs.NextRenewal.UTC().Format(time.RFC3339))
		}
		if rs.LastError != "" {
			cond.Message += "; last round failed: " + rs.LastError
		}
	}
	return cond
}

// renewalStatus reads the renewal state and computes its condition.
func renewalStatus(c *cluster.Cluster, now time.Time) (*RenewalStatus, Condition) {
	rs, err := Renewal(c, now)
	return rs, renewalCondition(rs, err, rs.PID != 0 && proc.Alive(rs.PID), now)
}
