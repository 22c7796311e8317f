package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/hostset"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Status is the state of a cluster. Its JSON field names are stable: scripts
// depend on them (docs/cli.md lists them).
type Status struct {
	Cluster    ClusterStatus  `json:"cluster"`
	Members    []MemberStatus `json:"members"`
	Conditions []Condition    `json:"conditions"`
	// Agents is each agent (one per host) as the command found it.
	Agents []AgentStatus `json:"agents"`
	// CertificateRenewal is this directory's certificate renewal loop
	// (CondCertificateRenewal); absent with TLS off and for an attached
	// cluster, whose certificates Steward does not renew.
	CertificateRenewal *RenewalStatus `json:"certificateRenewal,omitempty"`
	// AutoRecovery is the latest decision and action of this directory's
	// automatic recovery (recovery.mode auto); absent when it never ran.
	AutoRecovery *AutoRecoveryState `json:"autoRecovery,omitempty"`
}

// AgentStatus is one agent as a status probe reached it.
type AgentStatus struct {
	Name string `json:"name"`
	// Host is the agent's host address; empty for an agent on this
	// machine (reached on its Unix socket).
	Host      string `json:"host,omitempty"`
	Endpoint  string `json:"endpoint"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// MetricsURL is where Prometheus scrapes the agent (the spec's
	// metricsAddress); empty when it serves no metrics.
	MetricsURL string `json:"metricsURL,omitempty"`
	// Binaries is how the host's binary store compares with this
	// machine's (binstep.go); absent for an agent on this machine.
	Binaries *cluster.HostBinaries `json:"binaries,omitempty"`
}

// ClusterStatus describes the cluster as a whole.
type ClusterStatus struct {
	Name string `json:"name"`
	// ID is etcd's cluster ID in hex; empty when no member answered.
	ID string `json:"id"`
	// Version is the cluster version etcd agreed on (e.g. "3.6.0").
	Version string `json:"clusterVersion"`
	// StorageVersion is the data format version (etcd 3.6 and later).
	StorageVersion string `json:"storageVersion,omitempty"`
	// Leader is the leader's member name; empty without a leader.
	Leader   string `json:"leader"`
	LeaderID string `json:"leaderID,omitempty"`
	// Quorate is true when a majority of voting members serve reads.
	Quorate bool `json:"quorate"`
	// VotingMembers and Learners count etcd's member list.
	VotingMembers  int `json:"votingMembers"`
	Learners       int `json:"learners"`
	HealthyMembers int `json:"healthyMembers"`
	// SpecVersion is the etcd version the spec asks for.
	SpecVersion string `json:"specVersion"`
	// Timeline is the history the cluster serves (spec.Timeline: 1 until
	// the first restore, each restore begins a new one); Parent and
	// BranchRevision where it branched off (docs/backup.md#timelines).
	Timeline       int64 `json:"timeline"`
	ParentTimeline int64 `json:"parentTimeline,omitempty"`
	BranchRevision int64 `json:"branchRevision,omitempty"`
	// Stopped: the whole cluster is stopped (ErrStopped); nothing was
	// probed beyond the agent's socket and the members' client ports.
	Stopped bool `json:"stopped,omitempty"`
}

// MemberStatus describes one member.
type MemberStatus struct {
	Name       string   `json:"name"`
	ID         string   `json:"id"`
	ClientURLs []string `json:"clientURLs"`
	PeerURLs   []string `json:"peerURLs"`
	// Version is the version the running binary reports.
	Version string `json:"version"`
	// Role is leader, follower, learner or unknown.
	Role    string `json:"role"`
	Healthy bool   `json:"healthy"`
	// DBSize and DBSizeInUse are in bytes.
	DBSize           int64    `json:"dbSize"`
	DBSizeInUse      int64    `json:"dbSizeInUse"`
	Revision         int64    `json:"revision"`
	RaftTerm         uint64   `json:"raftTerm"`
	RaftAppliedIndex uint64   `json:"raftAppliedIndex"`
	Alarms           []string `json:"alarms"`
	// LastError is the newest problem seen: the probe's error, the agent's
	// last error or last unexpected exit.
	LastError string `json:"lastError,omitempty"`
	// Agent, Process, PID and Restarts come from the agent running it.
	Agent    string `json:"agent"`
	Process  string `json:"process"`
	PID      int    `json:"pid,omitempty"`
	Restarts int    `json:"restarts"`
	// DataDirVersion is the version last run successfully on the data dir.
	DataDirVersion string `json:"dataDirVersion,omitempty"`
	// DowngradeTarget is the version etcd's downgrade, enabled, goes to,
	// as this member reports it (3.6 and later do; 3.5 does not).
	DowngradeTarget string `json:"downgradeTarget,omitempty"`
	// InSpec is false for a member etcd knows that the spec does not.
	InSpec bool `json:"inSpec"`

	// OnlyAlarms: the member answers and serves reads; only a raised
	// alarm makes it unhealthy (defragmentation may go on to clear NOSPACE).
	OnlyAlarms bool `json:"-"`
}

// Condition follows Kubernetes' condition shape, with DEP-01's types.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // True, False or Unknown
	Reason             string    `json:"reason"`
	Message            string    `json:"message"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
	// Fix names what ends the condition when a command does it: the
	// command that shows the condition adds its words to Message
	// (cli.ConditionAdvice). Not shown on its own.
	Fix Fix `json:"-"`
}

// Fix is what ends a condition, when a command does: a library names no
// command, the command layer says which.
type Fix string

// Fixes of the plan and renewal conditions.
const (
	// FixPlanFailed: a failed plan is resumed or aborted, once its
	// cause is fixed.
	FixPlanFailed Fix = "plan-failed"
	// FixPlanInterrupted: a plan no process runs is resumed.
	FixPlanInterrupted Fix = "plan-interrupted"
	// FixRenewerStart: the coordinator's renewal process is started
	// again.
	FixRenewerStart Fix = "renewer-start"
	// FixAgentStart: this machine's agent, which runs the renewal loop,
	// is started.
	FixAgentStart Fix = "agent-start"
)

// Condition types.
const (
	CondReady           = "Ready"
	CondAllMembersReady = "AllMembersReady"
	CondBackupReady     = "BackupReady"
)

// Condition returns the condition of a type.
func (s *Status) Condition(t string) (Condition, bool) {
	for _, c := range s.Conditions {
		if c.Type == t {
			return c, true
		}
	}
	return Condition{}, false
}

// Member returns the status of a named member.
func (s *Status) Member(name string) (MemberStatus, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return MemberStatus{}, false
}

// errNotAdmin: this machine cannot ask agents on other hosts.
var errNotAdmin = errors.New("not asked: only the coordinator (admin certificate) asks agents on other hosts")

// probe is what one member's endpoint said.
type probe struct {
	status   *clientv3.StatusResponse
	err      error // status RPC error
	readErr  error // linearizable read error (nil: healthy)
	alarms   []string
	clusterV string
}

// probeTimeout bounds every per-member call of a status probe.
const probeTimeout = cluster.ProbeTimeout

// probeEndpoint asks the member serving endpoint for its status, a
// linearizable read (a learner: whether it knows a leader), its alarms and
// the cluster version, each within probeTimeout.
func probeEndpoint(ctx context.Context, c *cluster.Cluster, endpoint string) probe {
	var p probe
	cli, err := c.Client(endpoint)
	if err != nil {
		p.err = err
		return p
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	p.status, p.err = cli.Status(sctx, endpoint)
	if p.err != nil {
		p.readErr = p.err
		return p
	}
	// The linearizable read and the alarm list need quorum: without it
	// each waits out probeTimeout. They and the cluster version are asked
	// at the same time, so a probe of a member without quorum takes one
	// probeTimeout, not two (docs/benchmarks.md, quorum loss).
	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		if p.status.IsLearner {
			// Learners serve no linearizable reads; a learner that answers
			// status and knows a leader is healthy.
			if p.status.Leader == 0 {
				p.readErr = errors.New("learner has no leader")
			}
			return
		}
		rctx, rcancel := context.WithTimeout(ctx, probeTimeout)
		_, p.readErr = cli.Get(rctx, "health", clientv3.WithCountOnly())
		rcancel()
	}()
	go func() {
		defer wg.Done()
		actx, acancel := context.WithTimeout(ctx, probeTimeout)
		defer acancel()
		if ar, err := cli.AlarmList(actx); err == nil {
			for _, a := range ar.Alarms {
				if a.MemberID == p.status.Header.MemberId {
					p.alarms = append(p.alarms, a.Alarm.String())
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		p.clusterV = clusterVersion(ctx, c, endpoint)
	}()
	// Each goroutine writes its own fields of p (readErr, alarms,
	// clusterV); p is read only after Wait.
	wg.Wait()
	return p
}

// wrongMember returns an error when the member that answered on url (ID
// answered) is not the member name expects: etcd's member list gives name
// another ID, or gives answered another name.
func wrongMember(name, url string, answered uint64, byName map[string]*pb.Member, byID map[uint64]*pb.Member) error {
	if em, ok := byName[name]; ok && em.ID != answered {
		who := fmt.Sprintf("member ID %x", answered)
		if other, ok := byID[answered]; ok && other.Name != "" {
			who = fmt.Sprintf("%s (ID %x)", other.Name, answered)
		}
		return fmt.Errorf("%s answers on %s, not %s (ID %x): is %s running, and is its URL another member's?", who, url, name, em.ID, name)
	}
	if other, ok := byID[answered]; ok && other.Name != "" && other.Name != name {
		return fmt.Errorf("%s (ID %x) answers on %s, not %s: is %s running, and is its URL another member's?", other.Name, answered, url, name, name)
	}
	return nil
}

// ErrWrongMember: the member answering on a URL is not the member expected
// there (an alias such as localhost and 127.0.0.1, a port another member
// took or a proxy forwards).
var ErrWrongMember = errors.New("another member answers on the URL")

// Endpoint asks member name, whose etcd ID is id, for its status
// (etcd's Status RPC) on endpoint, one of its client URLs, within the probe
// timeout. An answer from any other member is refused with ErrWrongMember,
// naming who answered, so that no caller takes another member's leader,
// index or database size for the one it asked about.
func Endpoint(ctx context.Context, c *cluster.Cluster, name string, id uint64, endpoint string) (*clientv3.StatusResponse, error) {
	p := probeEndpoint(ctx, c, endpoint)
	if p.err != nil {
		return nil, p.err
	}
	if answered := p.status.Header.GetMemberId(); answered != id {
		return nil, wrongAnswer(name, id, endpoint, answered, memberName(ctx, c, endpoint, answered))
	}
	return p.status, nil
}

// CheckAnswer returns an ErrWrongMember error when the status r, asked of
// member name (etcd ID id) on url with a client of its own, came from
// another member; nil when it came from the member asked.
func CheckAnswer(name string, id uint64, url string, r *clientv3.StatusResponse) error {
	if answered := r.Header.GetMemberId(); answered != id {
		return wrongAnswer(name, id, url, answered, "")
	}
	return nil
}

// MemberID is the member's etcd ID as a number; 0 when it has none (not
// answering, not in etcd's member list).
func (m MemberStatus) MemberID() uint64 {
	id, err := strconv.ParseUint(m.ID, 16, 64)
	if err != nil {
		return 0
	}
	return id
}

// wrongAnswer is Endpoint's refusal: member answered (named
// answeredName when etcd's member list names it) answered on url instead
// of name (ID want).
func wrongAnswer(name string, want uint64, url string, answered uint64, answeredName string) error {
	who := fmt.Sprintf("member ID %x", answered)
	if answeredName != "" {
		who = fmt.Sprintf("%s (ID %x)", answeredName, answered)
	}
	return fmt.Errorf("%w: %s answers on %s, not %s (ID %x): is %s running, and is its URL another member's (an alias such as localhost for 127.0.0.1, a port taken by another member)?",
		ErrWrongMember, who, url, name, want, name)
}

// memberName names member id from etcd's member list as endpoint sees it;
// "" when it cannot.
func memberName(ctx context.Context, c *cluster.Cluster, endpoint string, id uint64) string {
	cli, err := c.Client(endpoint)
	if err != nil {
		return ""
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, err := cli.MemberList(lctx)
	if err != nil {
		return ""
	}
	for _, m := range resp.Members {
		if m.ID == id {
			return m.Name
		}
	}
	return ""
}

// clusterVersion reads etcdcluster from the member's /version endpoint.
func clusterVersion(ctx context.Context, c *cluster.Cluster, endpoint string) string {
	tr := &http.Transport{}
	if !c.Spec.TLS.Disabled {
		tc, err := pki.ClientTLSFiles(c.Spec.ClientFiles(c.Dir))
		if err != nil {
			return ""
		}
		tr.TLSClientConfig = tc
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: probeTimeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(endpoint, "/")+"/version", nil)
	if err != nil {
		return ""
	}
	resp, err := hc.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var v struct {
		Cluster string `json:"etcdcluster"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil || v.Cluster == "not_decided" {
		return ""
	}
	return v.Cluster
}

// Get reports the cluster's state, merging what etcd and the agents say:
// LiveMembers, then certificate renewal and the conditions.
func Get(ctx context.Context, c *cluster.Cluster) (*Status, error) {
	// The hosts' binary stores, asked alongside the members' probes.
	var bins map[string]*cluster.HostBinaries
	binsDone := make(chan struct{})
	go func() {
		defer close(binsDone)
		bins = c.CompareHostBinaries(ctx)
	}()
	st, err := LiveMembers(ctx, c)
	<-binsDone
	if err != nil {
		return nil, err
	}
	for i := range st.Agents {
		st.Agents[i].Binaries = bins[st.Agents[i].Name]
	}
	now := time.Now()
	if renews(c) {
		st.CertificateRenewal, _ = renewalStatus(c, now)
	}
	st.AutoRecovery, _ = ReadAutoRecovery(c.Dir)
	st.Conditions = conditions(ctx, c, st, now)
	return st, nil
}

// specStatus is what the cluster's status takes from the spec alone: its
// name, the version asked for and the timeline it is on (also for a
// stopped cluster, Stopped).
func specStatus(c *cluster.Cluster) ClusterStatus {
	cs := ClusterStatus{Name: c.Spec.Name, SpecVersion: c.Spec.Version, Timeline: c.Spec.TimelineID()}
	if t := c.Spec.Timeline; t != nil {
		cs.ParentTimeline, cs.BranchRevision = t.Parent, t.BranchRevision
	}
	return cs
}

// LiveMembers is Get without certificate renewal and conditions (which
// read the backup store and handshake with every member for the
// certificate it serves): the cluster and its members as etcd and the
// agents see them, for a command that needs only the leader and the
// members' health before it starts (`backup now`).
func LiveMembers(ctx context.Context, c *cluster.Cluster) (*Status, error) {
	specMembers := c.Spec.Members
	st := &Status{Cluster: specStatus(c)}

	// Probe every spec member in parallel.
	probes := make([]probe, len(specMembers))
	var wg sync.WaitGroup
	for i, m := range specMembers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			probes[i] = probeEndpoint(ctx, c, m.ClientURL)
		}()
	}
	// etcd's member list, from any member that can give it, asked at the
	// same time as the probes: the linearizable list needs quorum and,
	// without it, waits out probeTimeout before the serializable one is
	// asked; after the probes that wait added to theirs (docs/benchmarks.md,
	// quorum loss). list is written by this goroutine only, read after
	// listDone.
	var list *clientv3.MemberListResponse
	listDone := make(chan struct{})
	go func() {
		defer close(listDone)
		list = memberList(ctx, c)
	}()
	// Ask the agents at the same time (hostset.Each). A host's copy of the
	// spec: other hosts' agents let in only the admin; do not knock.
	admin := c.Admin()
	asked := hostset.All(c.Spec).Filter(func(a spec.Agent) bool { return admin || !a.Remote() })
	rs := hostset.Each(ctx, asked, hostset.Options{Timeout: probeTimeout}, func(ctx context.Context, a spec.Agent) ([]agentapi.MemberStatus, error) {
		ac, err := c.Agent(a.Name)
		if err != nil {
			return nil, err
		}
		return ac.Members(ctx)
	})
	wg.Wait()
	agentState := map[string]agentapi.MemberStatus{}
	agentErr := map[string]error{}
	for _, a := range c.Spec.Agents {
		if a.Remote() && !admin {
			agentErr[a.Name] = errNotAdmin
		}
	}
	for _, r := range rs {
		agentErr[r.Host.Name] = r.Err
		for _, m := range r.Value {
			agentState[r.Host.Name+"/"+m.Name] = m
		}
	}
	for _, a := range c.Spec.Agents {
		as := AgentStatus{Name: a.Name, Host: a.Host, Endpoint: a.Endpoint(), Reachable: agentErr[a.Name] == nil, MetricsURL: c.Spec.MetricsURL(a)}
		if err := agentErr[a.Name]; err != nil {
			as.Error = cluster.ShortErr(err)
			var ue *agentapi.UnreachableError
			if errors.As(err, &ue) {
				as.Error = ue.Short()
			}
		}
		st.Agents = append(st.Agents, as)
	}

	<-listDone

	byName := map[string]*pb.Member{}
	byID := map[uint64]*pb.Member{}
	if list != nil {
		for _, m := range list.Members {
			byID[m.ID] = m
			if m.Name != "" {
				byName[m.Name] = m
			}
		}
	}

	// A member answering on another member's URL (an alias, a port
	// reused) is not the member expected: count it as not answering.
	for i, m := range specMembers {
		if probes[i].err == nil && probes[i].status != nil && probes[i].status.Header != nil {
			if err := wrongMember(m.Name, m.ClientURL, probes[i].status.Header.MemberId, byName, byID); err != nil {
				probes[i] = probe{err: err, readErr: err}
			}
		}
	}

	var leaderID uint64
	seen := map[uint64]bool{}
	for i, m := range specMembers {
		p := probes[i]
		ms := MemberStatus{
			Name: m.Name, ClientURLs: []string{m.ClientURL}, PeerURLs: []string{m.PeerURL},
			Role: "unknown", Alarms: []string{}, Agent: m.Agent, InSpec: true, Process: "Unknown",
		}
		if em, ok := byName[m.Name]; ok {
			ms.ID = fmt.Sprintf("%x", em.ID)
			ms.PeerURLs = em.PeerURLs
			if len(em.ClientURLs) > 0 {
				ms.ClientURLs = em.ClientURLs
			}
			seen[em.ID] = true
		}
		if p.err == nil {
			s := p.status
			ms.ID = fmt.Sprintf("%x", s.Header.MemberId)
			seen[s.Header.MemberId] = true
			ms.Version = s.Version
			ms.DBSize = s.DbSize
			ms.DBSizeInUse = s.DbSizeInUse
			ms.Revision = s.Header.Revision
			ms.RaftTerm = s.RaftTerm
			ms.RaftAppliedIndex = s.RaftAppliedIndex
			if d := s.DowngradeInfo; d != nil && d.Enabled {
				ms.DowngradeTarget = d.TargetVersion
			}
			ms.Alarms = append(ms.Alarms, p.alarms...)
			switch {
			case s.IsLearner:
				ms.Role = "learner"
			case s.Leader != 0 && s.Leader == s.Header.MemberId:
				ms.Role = "leader"
			default:
				ms.Role = "follower"
			}
			if s.Leader != 0 && p.readErr == nil && !s.IsLearner {
				leaderID = s.Leader
			}
			if st.Cluster.ID == "" {
				st.Cluster.ID = fmt.Sprintf("%x", s.Header.ClusterId)
			}
			if st.Cluster.Version == "" {
				st.Cluster.Version = p.clusterV
			}
			if st.Cluster.StorageVersion == "" {
				st.Cluster.StorageVersion = s.StorageVersion
			}
			if len(s.Errors) > 0 {
				ms.LastError = strings.Join(s.Errors, "; ")
			}
		}
		ms.Healthy = p.err == nil && p.readErr == nil && len(p.alarms) == 0
		ms.OnlyAlarms = p.err == nil && p.readErr == nil && len(p.alarms) > 0
		if p.readErr != nil {
			ms.LastError = cluster.ShortErr(p.readErr)
		} else if len(p.alarms) > 0 {
			ms.LastError = "alarm raised: " + strings.Join(p.alarms, ", ")
		}
		if m.Agent == "" && c.Spec.IsExternal() {
			// Someone else runs it: no agent to ask.
			ms.Agent, ms.Process = External, External
		} else if as, ok := agentState[m.Agent+"/"+m.Name]; ok {
			ms.Process = as.State
			ms.PID = as.PID
			ms.Restarts = as.Restarts
			ms.DataDirVersion = as.DataDirVersion
			if !ms.Healthy {
				switch {
				case as.State != agentapi.StateRunning && as.LastError != "":
					ms.LastError = as.State + ": " + as.LastError
				case as.State != agentapi.StateRunning && as.LastExit != "":
					ms.LastError = as.State + ": last exit: " + as.LastExit
				case as.State == agentapi.StateStopped:
					ms.LastError = "stopped by the operator"
				}
			}
		} else if err := agentErr[m.Agent]; err != nil {
			ms.Process = "Unknown"
			var ue *agentapi.UnreachableError
			switch {
			case ms.Healthy:
			case errors.As(err, &ue):
				ms.LastError = ue.Short()
			default:
				ms.LastError = fmt.Sprintf("agent %s: %v", m.Agent, cluster.ShortErr(err))
			}
		} else {
			ms.Process = "NotRunByAgent"
		}
		if ms.Healthy {
			st.Cluster.HealthyMembers++
		}
		st.Members = append(st.Members, ms)
	}
	// Members etcd knows that the spec does not.
	if list != nil {
		for _, em := range list.Members {
			if seen[em.ID] {
				continue
			}
			role := "follower"
			if em.IsLearner {
				role = "learner"
			}
			name := em.Name
			if name == "" {
				name = fmt.Sprintf("(unstarted %x)", em.ID)
			}
			st.Members = append(st.Members, MemberStatus{
				Name: name, ID: fmt.Sprintf("%x", em.ID), ClientURLs: em.ClientURLs, PeerURLs: em.PeerURLs,
				Role: role, Alarms: []string{}, Process: "Unknown",
				LastError: "member is in etcd's member list but not in the cluster spec",
			})
		}
	}
	if leaderID != 0 {
		st.Cluster.LeaderID = fmt.Sprintf("%x", leaderID)
		for i := range st.Members {
			if st.Members[i].ID == st.Cluster.LeaderID {
				st.Cluster.Leader = st.Members[i].Name
			}
		}
	}
	// A successful linearizable read through any member proves quorum.
	for i := range specMembers {
		if probes[i].err == nil && probes[i].readErr == nil && !probes[i].status.IsLearner {
			st.Cluster.Quorate = true
		}
	}
	var listed []*pb.Member
	if list != nil {
		listed = list.Members
	}
	st.Cluster.VotingMembers, st.Cluster.Learners = countRoles(listed, probes)
	sort.SliceStable(st.Members, func(i, j int) bool { return st.Members[i].Name < st.Members[j].Name })
	return st, nil
}

// memberList is etcd's member list from any member that can give it: the
// linearizable list, else (no quorum) the serializable one of a member
// that answers; nil when no member gives either.
func memberList(ctx context.Context, c *cluster.Cluster) *clientv3.MemberListResponse {
	cli, err := c.Client()
	if err != nil {
		return nil
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, probeTimeout)
	list, _ := cli.MemberList(lctx)
	cancel()
	if list == nil {
		lctx, cancel := context.WithTimeout(ctx, probeTimeout)
		list, _ = cli.MemberList(lctx, clientv3.WithSerializable())
		cancel()
	}
	return list
}

// countRoles counts the voting members and learners of etcd's member list
// (nil when no member could give it). A member whose own status says it is
// a learner is counted as one even when the list is missing (every member
// timed out) or older than its status (a serializable list from a member
// behind): a cluster with a learner is never reported as all voters, so
// never as healthy. Without a list, every other probed member counts as a
// voter.
func countRoles(list []*pb.Member, probes []probe) (voting, learners int) {
	learner := map[uint64]bool{}
	for _, p := range probes {
		if p.err == nil && p.status != nil && p.status.IsLearner && p.status.Header != nil {
			learner[p.status.Header.MemberId] = true
		}
	}
	if list == nil {
		return len(probes) - len(learner), len(learner)
	}
	for _, m := range list {
		if m.IsLearner || learner[m.ID] {
			learners++
		} else {
			voting++
		}
		delete(learner, m.ID)
	}
	// Learners the list does not know yet.
	return voting, learners + len(learner)
}

// Unhealthy names each unhealthy member with its last error.
func (s *Status) Unhealthy() string { return unhealthySummary(s) }

func unhealthySummary(st *Status) string {
	var parts []string
	for _, m := range st.Members {
		if !m.Healthy {
			e := m.LastError
			if e == "" {
				e = "not healthy"
			}
			parts = append(parts, m.Name+": "+e)
		}
	}
	if len(parts) == 0 {
		return "no member is unhealthy"
	}
	return "not ready: " + strings.Join(parts, "; ")
}
