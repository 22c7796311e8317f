package agent

import (
	"errors"

	"github.com/etcd-steward/steward/pkg/recoverycount"
)

// PutRecoveryCounts keeps the automatic recovery's counts a coordinator
// pushed (recoverycount.Counts) in DIR/status/recovery-counts.json,
// merged with those kept (recoverycount.Merge: no count goes
// backwards, a late or repeated push changes nothing), for the metrics
// server to export. Only an agent that joined a cluster keeps them: the
// coordinator's own agent exports its directory's state file. Counts
// that do not validate are refused and change nothing; so does a kept
// file that cannot be read (it is never overwritten with fewer counts).
func (a *Agent) PutRecoveryCounts(rc recoverycount.Counts) error {
	if a.opts.ClusterToken == "" {
		return badRequest{errors.New("only an agent that joined a cluster keeps its coordinator's recovery counts (this is the coordinator's own agent, which exports its directory's)")}
	}
	if err := rc.Validate(); err != nil {
		return badRequest{err}
	}
	a.countsMu.Lock()
	defer a.countsMu.Unlock()
	have, err := recoverycount.Read(a.opts.Dir)
	if err != nil {
		return err
	}
	if have == nil {
		have = &recoverycount.Received{}
	}
	merged, changed, err := recoverycount.Merge(have.Recorders, rc)
	if err != nil {
		return badRequest{err}
	}
	if !changed {
		return nil
	}
	return recoverycount.Write(a.opts.Dir, &recoverycount.Received{Recorders: merged})
}
