package cli

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/bootstrap"
	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/handover"
	"github.com/etcd-steward/steward/pkg/kmigrate"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/membership"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/recovery"
	"github.com/etcd-steward/steward/pkg/restore"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
	"github.com/etcd-steward/steward/pkg/upgrade"
)

// Advise appends advice to err when errors.Is(err, kind), word for word:
// advice starts with its own separator (": ", "; ", " ("), so the result
// reads as the library's message once read with the advice in it. It
// still wraps err; nil and errors of other kinds pass unchanged.
func Advise(err, kind error, advice string) error {
	if err != nil && errors.Is(err, kind) {
		return fmt.Errorf("%w%s", err, advice)
	}
	return err
}

// CARollbackHint adds to the refusals of a CA rotation rollback
// (carotate.RollbackOf, carotate.Rollback) the commands that show, finish
// or start the plans they are about, for `steward rollback` and `steward
// certs rotate-ca --rollback`.
func CARollbackHint(err error) error {
	if errors.Is(err, carotate.ErrNoRotationToRollBack) && !errors.Is(err, carotate.ErrRolledBack) {
		return fmt.Errorf("%w; `steward plan show` shows it", err)
	}
	err = Advise(err, carotate.ErrRotationDone, "; to change the CA again, run `steward certs rotate-ca`")
	err = Advise(err, carotate.ErrOldCADropped, ": `steward plan resume` finishes the rotation; to go back, run `steward certs rotate-ca` again after it")
	return Advise(err, carotate.ErrPlanRunning, ": `steward plan abort` stops it after its step, then `steward rollback` rolls a CA rotation back")
}

// BackupHint adds the `steward backup` commands that take or list backups
// to the errors of finding one (no full backup, none of that ID, a delta
// named), for the commands that read the backup store.
func BackupHint(err error) error {
	err = Advise(err, backup.ErrNoFullBackup, ": take one with `steward backup now`")
	err = Advise(err, kstorage.ErrNoBackup, ": list the backups with `steward backup list` (or name `latest`)")
	err = Advise(err, backup.ErrUnknownBackup, "; `steward backup list` lists them (or name `latest`)")
	return Advise(err, kstorage.ErrNotFull, "; list them with `steward backup list`")
}

// StoppedHint adds the command that stops the cluster to a restore refused
// while members run (restore.ErrMembersRunning), for `steward restore` and
// `steward recover`, whose seed is restored.
func StoppedHint(err error) error {
	return Advise(err, restore.ErrMembersRunning, " (`steward down`)")
}

// DowngradeHint adds the command that finishes the plan whose downgrade
// refuses a new member (membership.ErrDowngradeOfPlan), for `steward
// member add`, `member replace` and `recover`, which replaces members.
func DowngradeHint(err error) error {
	return Advise(err, membership.ErrDowngradeOfPlan, " (`steward plan resume`) first")
}

// RestorePendingHint adds how to finish a restore stopped in its commit
// (cluster.ErrRestoreInterrupted, also in the failure of a commit), for
// `steward up`, `steward recover` and `steward restore`.
func RestorePendingHint(err error) error {
	return Advise(err, cluster.ErrRestoreInterrupted, ": run steward restore --force again (the same options) to finish it")
}

// LibraryAdvice adds to the error of any command (main prints it) the
// advice the libraries leave to the command layer (docs/ARCHITECTURE.md,
// Errors): the commands that finish, re-run or fix what failed, keyed by
// the libraries' sentinel and typed errors, so a library names no command.
// The words are those the libraries used to write, at the end of the
// message. Advice of a command's own that must come after it (PlanHint's)
// asks for it first; an error advised once is left as it is.
func LibraryAdvice(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[advised](err); ok {
		return err
	}
	// Advice always adds words; errors are compared by their text (an
	// error's dynamic type need not be comparable).
	if a := libraryAdvice(err); a.Error() != err.Error() {
		return advised{a}
	}
	return err // no advice: the same error
}

// advised marks an error LibraryAdvice completed.
type advised struct{ error }

func (a advised) Unwrap() error { return a.error }

func libraryAdvice(err error) error {
	var rerun *recovery.RerunError
	var unfinished *membership.UnfinishedError
	switch {
	case errors.As(err, &rerun):
		// A recovery's own advice covers the replaces it ran.
		switch {
		case rerun.Unadded != nil:
			err = fmt.Errorf("%w; once their hosts are fixed, re-run `steward recover` (or `steward member replace NAME` for each of %v)", err, rerun.Unadded)
		case rerun.Before != "":
			err = fmt.Errorf("%w (%s: re-run `steward recover`)", err, rerun.Before)
		case rerun.After != "":
			err = fmt.Errorf("%w (re-run `steward recover`: %s)", err, rerun.After)
		default:
			err = fmt.Errorf("%w (re-run `steward recover`)", err)
		}
	case errors.As(err, &unfinished):
		err = fmt.Errorf("%w (re-run `steward member replace %s` to continue)", err, unfinished.Member)
	}
	err = Advise(err, recovery.ErrPlanOpen, "; resume it (`steward plan resume`) or abort it (`steward plan abort`) first")
	err = Advise(err, recovery.ErrJournalUnreadable, "; check the cluster with `steward status`, then remove the file and re-run `steward recover`")
	var superseded *handover.SupersededError
	if errors.As(err, &superseded) {
		if superseded.Mine == 0 {
			err = fmt.Errorf("%w (`steward takeover`)", err)
		} else {
			err = fmt.Errorf("%w (`steward takeover` here takes over again)", err)
		}
	}
	err = Advise(err, pki.ErrRotationInProgress, ": `steward plan resume` finishes it, then certificates are issued and renewed again")
	if errors.Is(err, cluster.ErrOperatorCerts) {
		advice := "; renew them with that CA (`steward certs list` shows their expiry, and status warns before they expire)"
		if errors.Is(err, cluster.ErrOperatorCertsAdopted) {
			advice += ", or hand Steward that CA's certificate and key (`steward certs take-over`)"
		}
		err = fmt.Errorf("%w%s", err, advice)
	}
	err = Advise(err, adopt.ErrUnhealthy, " (`steward status`)")
	err = AdviseAfter(err, status.ErrWrongMember, " Check `steward status` and the spec's URLs")
	err = AdviseAfter(err, upgrade.ErrMixedVersions, " (`steward plan show`)")
	err = AdviseWithin(err, spec.ErrOperatorFileEmpty, "after the certificate take-over)", "after `steward certs take-over`)")
	err = AdviseWithin(err, spec.ErrAgentBeforeAdopt, "until adopt hands", "until `steward adopt` hands")
	err = AdviseWithin(err, kmigrate.ErrStateLocked, "another storage migration", "another steward migrate storage")
	// The renewal loop's round errors (the commands that run it pass
	// LibraryAdvice to it: status shows what it records).
	err = AdviseAfter(err, certs.ErrRotationNotRunning, ": run `steward certs rotate-ca` to finish it")
	err = AdviseWithin(err, certs.ErrHostCannotSign, "(its renewal loop)", "(its renewal loop or `steward certs renew`)")
	err = AdviseAfter(err, certs.ErrCALimit, " with `steward certs rotate-ca`")
	err = adviseUnreachable(err)
	// A stored binary's problem (a member's start, a tool, a spec's
	// version, the agent's refusals).
	err = adviseEach(err, func(e error) (string, bool) {
		if pe, ok := e.(*binaries.ProblemError); ok {
			return BinaryMessage(pe.Problem), true
		}
		return "", false
	})
	// The agent's errors (the agent command passes LibraryAdvice to it).
	if de, ok := errors.AsType[*agent.DataDirError](err); ok {
		err = reword(err, de.Error(), de.Error()+" with `steward member replace "+de.Member+"` (or `steward recover` when a majority is lost)")
	}
	err = AdviseWithin(err, agent.ErrNoHostCerts, "renew there)", "use `steward certs renew` there)")
	err = AdviseWithin(err, agent.ErrNotJoined, "joined a cluster keeps", "joined a cluster (steward agent --join) keeps")
	err = Advise(err, agent.ErrNoKubeManifests, " (start it with --kube-manifests DIR, kubeadm's /etc/kubernetes/manifests)")
	if ce, ok := errors.AsType[*upgrade.ChecksError](err); ok {
		msg := ce.Error()
		for _, ch := range ce.Failed {
			msg = strings.Replace(msg, ch.Name+": "+ch.Message, ch.Name+": "+CheckMessage(ch), 1)
		}
		err = reword(err, ce.Error(), msg)
	}
	return err
}

// Progress returns the progress lines of a command, written to w, with
// the commands that take the steps libraries name in them
// (progress.Hint), and an error printed in a line with the advice main
// adds to errors (LibraryAdvice: a warning reads as the error would).
func Progress(w io.Writer) progress.Func {
	say := progress.To(w).Rendered(hintWords)
	return func(format string, args ...any) {
		out := make([]any, len(args))
		for i, a := range args {
			out[i] = a
			if err, ok := a.(error); ok {
				out[i] = LibraryAdvice(err)
			}
		}
		say(format, out...)
	}
}

// hintWords is the command that takes a step a library's progress line
// names; "" leaves the library's plain words.
func hintWords(h progress.Hint) string {
	switch h.Kind {
	case bootstrap.HintUp:
		return "`steward up`"
	case bootstrap.HintRestartMember:
		if len(h.Args) == 1 {
			return "`steward member stop " + h.Args[0] + "` then `start`"
		}
	case bootstrap.HintAddHost:
		return "`steward host add`"
	case restore.HintStartCluster:
		return "start the cluster with `steward up`"
	}
	return ""
}

// adviseUnreachable adds what to check after each unreachable agent in
// err (a joined error may name several hosts).
func adviseUnreachable(err error) error {
	if !errors.Is(err, agentapi.ErrUnreachable) {
		return err
	}
	return adviseEach(err, func(e error) (string, bool) {
		if ue, ok := e.(*agentapi.UnreachableError); ok {
			return ue.Error() + "; check that `steward agent` runs there and that this machine reaches that address", true
		}
		return "", false
	})
}

// adviseEach rewrites, wherever err's text holds it, the message of each
// error of err's tree that advice advises: with the words it returns.
func adviseEach(err error, advice func(e error) (with string, ok bool)) error {
	text, seen := err.Error(), map[string]bool{}
	var walk func(e error)
	walk = func(e error) {
		if with, ok := advice(e); ok && !seen[e.Error()] {
			seen[e.Error()] = true
			text = strings.ReplaceAll(text, e.Error(), with)
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			if c := u.Unwrap(); c != nil {
				walk(c)
			}
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		}
	}
	walk(err)
	if text == err.Error() {
		return err
	}
	return reworded{text, err}
}

// BinaryMessage is a stored binary's problem as the commands show it: the
// library's words with the command that fixes it, by its kind.
func BinaryMessage(p binaries.Problem) string {
	switch p.Kind {
	case binaries.KindNotInStore:
		return strings.Replace(p.Message, ": import it: ", `: import it with "steward binaries import": `, 1)
	case binaries.KindChanged:
		return strings.Replace(p.Message, "; import the version again or restore the file", "; import the version again (`steward binaries import`) or restore the file", 1)
	case binaries.KindNotRecorded:
		words := "import etcd " + p.Version + " again from its release tarball or build directory"
		return strings.Replace(p.Message, words, words+": `steward binaries import --force --store "+p.Store+" --version "+p.Version+
			" SOURCE` (--force sets the unrecorded copy aside), or `make etcd-binaries` for the test store", 1)
	}
	return p.Message
}

// conditionAdvice is what follows a condition's message, by its Fix: the
// commands that end it.
var conditionAdvice = map[status.Fix]string{
	status.FixPlanFailed:      ", then `steward plan resume` or `steward plan abort`",
	status.FixPlanInterrupted: ": `steward plan resume`",
	status.FixRenewerStart:    "; `steward up` restarts it (or its systemd unit, deploy/systemd/steward-certrenew.service, does)",
	status.FixAgentStart:      " (`steward up`, or its systemd unit)",
}

// ConditionAdvice adds to the messages of st's conditions the commands
// that end them (Condition.Fix), as `steward status` shows and records
// them.
func ConditionAdvice(st *status.Status) {
	for i, c := range st.Conditions {
		st.Conditions[i].Message = c.Message + conditionAdvice[c.Fix]
	}
}

// checkAdvice is what follows a failed pre-flight check's message, by
// check name: the commands that fix what it found.
var checkAdvice = map[string]string{
	upgrade.CheckHealthy: " (`steward status`)",
	upgrade.CheckVoters:  "; finish `steward member add` (or remove them) first",
	upgrade.CheckAlarms:  "; clear them with `steward alarm disarm`",
}

// CheckMessage is a pre-flight check's message as `steward upgrade plan`
// shows it: a failed check's followed by its advice, each stored binary's
// problem it names with the command that fixes it (BinaryMessage), each
// push that fixes the binaries check named after its words.
func CheckMessage(ch upgrade.Check) string {
	if ch.OK {
		return ch.Message
	}
	msg := ch.Message
	for _, p := range ch.Binaries {
		msg = strings.Replace(msg, p.Message, BinaryMessage(p), 1)
	}
	for _, p := range ch.Pushes {
		cmd := "`steward binaries push " + p.Version + " --host " + strings.Join(p.Hosts, " --host ")
		if p.Replace {
			cmd += " --force"
		}
		msg = strings.Replace(msg, p.After, p.After+" with "+cmd+"`", 1)
	}
	return msg + checkAdvice[ch.Name]
}

// AdviseAfter inserts advice right after the message of the error of
// kind in err's chain (the deepest error that is of kind, the kind
// itself aside), where the library's message once ended: words an outer
// error adds after it (a joined error, "...: %w; ...") stay after the
// advice. Errors of other kinds pass unchanged.
func AdviseAfter(err, kind error, advice string) error {
	if err == nil || !errors.Is(err, kind) {
		return err
	}
	node := deepest(err, kind)
	if node == nil {
		return Advise(err, kind, advice)
	}
	return reword(err, node.Error(), node.Error()+advice)
}

// AdviseWithin names a command in the message of each error of kind in
// err's tree (a joined list of problems may hold several): the library's
// words for the step, words, become the command's, with. Errors of other
// kinds pass unchanged.
func AdviseWithin(err, kind error, words, with string) error {
	if err == nil || !errors.Is(err, kind) {
		return err
	}
	hs := holders(err, kind)
	if len(hs) == 0 {
		hs = []error{err} // err is kind itself
	}
	for _, h := range hs {
		err = reword(err, h.Error(), strings.Replace(h.Error(), words, with, 1))
	}
	return err
}

// holders are the errors of err's tree that are of kind through no
// other error of it (kind itself aside): each problem of that kind.
func holders(err, kind error) []error {
	var out []error
	var walk func(e error)
	walk = func(e error) {
		if e == nil || e == kind || !errors.Is(e, kind) {
			return
		}
		var children []error
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			children = []error{u.Unwrap()}
		case interface{ Unwrap() []error }:
			children = u.Unwrap()
		}
		n := len(out)
		for _, c := range children {
			walk(c)
		}
		if len(out) == n {
			out = append(out, e)
		}
	}
	walk(err)
	return out
}

// deepest is the error of kind furthest down err's tree, kind aside; nil
// when err is kind itself.
func deepest(err, kind error) error {
	var found error
	var walk func(e error)
	walk = func(e error) {
		if e == nil || e == kind || !errors.Is(e, kind) {
			return
		}
		found = e
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, c := range u.Unwrap() {
				walk(c)
			}
		}
	}
	walk(err)
	return found
}

// reword is err whose text has part (the first time) replaced by with; it
// still wraps err. When part is not in err's text, with's words after part
// go at the end (err unchanged when with does not start with part).
func reword(err error, part, with string) error {
	text := err.Error()
	if part == with {
		return err
	}
	if i := strings.Index(text, part); i >= 0 {
		text = text[:i] + with + text[i+len(part):]
	} else if extra, ok := strings.CutPrefix(with, part); ok {
		text += extra
	} else {
		return err
	}
	return reworded{text, err}
}

// reworded is an error with advice inserted in its text.
type reworded struct {
	text string
	err  error
}

func (r reworded) Error() string { return r.text }
func (r reworded) Unwrap() error { return r.err }
