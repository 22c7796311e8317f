package bootstrap

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-steward/steward/pkg/agent"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/progress"
	"github.com/etcd-steward/steward/pkg/refusal"
	"github.com/etcd-steward/steward/pkg/spec"
)

// AttachOptions configure Attach.
type AttachOptions struct {
	// Endpoints are client URLs of the cluster's members (at least one).
	Endpoints []string
	// CAFile, CertFile and KeyFile are the operator's CA bundle and
	// client certificate and key; Steward reads them, never rewrites them.
	CAFile, CertFile, KeyFile string
	// Name names the cluster in the spec (default "etcd").
	Name string
	// Timeout bounds each endpoint's answer (default 5 s).
	Timeout time.Duration
	// Continuous turns on continuous backups: the spec gets this
	// machine's agent (spec.LocalAgent), which Attach starts in the
	// background; its backup loop records every change.
	Continuous bool
	// MetricsAddress, when set, is where that agent serves Prometheus
	// metrics (spec agents[0].metricsAddress): a loopback HOST:PORT, as an
	// attached cluster has no Steward certificate to serve HTTPS with.
	// Needs Continuous.
	MetricsAddress string
	// StewardBinary is the executable that runs the agent (default: this one).
	StewardBinary string
}

// Refusals of Attach (refusal.Refusal kinds).
var (
	// ErrDirHoldsCluster: the Steward directory already holds a spec
	// (Init refuses it too).
	ErrDirHoldsCluster = errors.New("the Steward directory already holds a cluster")
	// ErrMixedClusters: the endpoints answer with different cluster IDs.
	ErrMixedClusters = errors.New("the endpoints belong to different clusters")
	// ErrCertificate: the certificate files cannot be loaded, or an
	// endpoint refuses them (or is not trusted by the CA given).
	ErrCertificate = errors.New("the certificate does not work against the endpoints")
	// ErrEndpoint: an endpoint is malformed or does not answer.
	ErrEndpoint = errors.New("an endpoint does not answer as an etcd member")
	// ErrMetricsAddress: a metrics address without the agent that would
	// serve it, or one that is not a loopback HOST:PORT.
	ErrMetricsAddress = errors.New("the metrics address cannot be served")
)

// checkMetricsAddress refuses a metrics address attach cannot serve: one
// without --continuous (no agent runs for the cluster then), or one that
// is not a loopback HOST:PORT (a non-loopback address is served over
// HTTPS with the agent's certificate from Steward's CA, which an attached
// cluster does not have).
func checkMetricsAddress(o AttachOptions) error {
	a := o.MetricsAddress
	if a == "" {
		return nil
	}
	if !o.Continuous {
		return refusal.New(ErrMetricsAddress, "metrics address %s: the agent that serves metrics runs only with continuous backups", a)
	}
	host, port, err := net.SplitHostPort(a)
	if err != nil || port == "" || host == "" {
		return refusal.New(ErrMetricsAddress, "metrics address %q is not HOST:PORT", a)
	}
	if !spec.IsLoopback(a) {
		return refusal.New(ErrMetricsAddress, "metrics address %s is not a loopback address: an attached cluster has no Steward certificate to serve metrics over HTTPS with", a)
	}
	return nil
}

// answer is what one endpoint said.
type answer struct {
	endpoint  string
	clusterID uint64
	memberID  uint64
	version   string
	err       error
}

// Attach writes the spec of a cluster Steward did not create and does not
// run: it checks that every endpoint answers, with the operator's
// certificate, as a member of one and the same cluster, lists the members
// from etcd, and writes DIR/cluster.yaml marking the cluster external
// (spec.External, naming the operator's files). Nothing is written on a
// refusal; a directory that already holds a spec is refused.
func Attach(ctx context.Context, dir string, o AttachOptions, say progress.Func) (*cluster.Cluster, error) {
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Name == "" {
		o.Name = "etcd"
	}
	specPath := filepath.Join(dir, spec.FileName)
	if _, err := os.Stat(specPath); err == nil {
		return nil, refusal.New(ErrDirHoldsCluster, "%s already holds a cluster (%s): attach writes a new spec only into a directory without one", dir, specPath)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("check %s: %w", specPath, err)
	}
	if err := checkMetricsAddress(o); err != nil {
		return nil, err
	}
	eps, scheme, err := checkEndpoints(o.Endpoints)
	if err != nil {
		return nil, err
	}
	tlsOn := scheme == "https"
	var tc *tls.Config
	if tlsOn {
		for _, f := range []*string{&o.CAFile, &o.CertFile, &o.KeyFile} {
			if *f == "" {
				return nil, refusal.New(ErrCertificate, "the endpoints use TLS: a CA file, a client certificate and its key are needed to reach them")
			}
			abs, err := filepath.Abs(*f)
			if err != nil {
				return nil, fmt.Errorf("certificate file %s: %w", *f, err)
			}
			*f = abs
		}
		tc, err = pki.ClientTLSFiles(o.CAFile, o.CertFile, o.KeyFile)
		if err != nil {
			return nil, refusal.New(ErrCertificate, "cannot load the client certificate: %v", err)
		}
	}

	// Every endpoint, concurrently: its cluster and member ID.
	answers := make([]answer, len(eps))
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() { answers[i] = ask(ctx, ep, tc, o.Timeout) })
	}
	wg.Wait()
	if err := judge(answers); err != nil {
		return nil, err
	}

	cli, err := dial(eps, tc)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	lctx, cancel := context.WithTimeout(ctx, o.Timeout)
	list, err := cli.MemberList(lctx)
	cancel()
	if err != nil {
		return nil, refusal.New(ErrEndpoint, "list the members of cluster %x: %v", answers[0].clusterID, err)
	}
	s, err := externalSpec(o, answers, list, tlsOn)
	if err != nil {
		return nil, err
	}
	// The members the endpoints did not name: their versions, best effort.
	for _, m := range list.Members {
		if len(m.ClientURLs) == 0 || slices.ContainsFunc(answers, func(a answer) bool { return a.memberID == m.ID }) {
			continue
		}
		if a := ask(ctx, m.ClientURLs[0], tc, o.Timeout); a.err == nil && a.version != "" && versionLess(a.version, s.Version) {
			s.Version = a.version
		}
	}
	if o.Continuous {
		s.Backup.Continuous = true
		s.Agents = []spec.Agent{{Name: spec.LocalAgent, Address: "unix://" + agent.SocketPath(dir), MetricsAddress: o.MetricsAddress}}
	}
	s.ApplyDefaults()
	c := &cluster.Cluster{Dir: dir, Spec: s, Progress: say}
	if _, err := c.ValidateSpec(s); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("steward dir: %w", err)
	}
	if err := s.Save(specPath); err != nil {
		return nil, err
	}
	if err := c.RecordClusterID(s.External.ClusterID); err != nil {
		say.Say("warning: %v", err)
	}
	say.Say("wrote %s: cluster %s (ID %s), %d members, etcd %s, attached (Steward does not run its members)", specPath, s.Name, s.External.ClusterID, len(s.Members), s.Version)
	if o.Continuous {
		// The spec stays: the agent is started again by any later
		// command that needs it, or by hand.
		if _, err := EnsureLocalAgent(ctx, c, o.StewardBinary); err != nil {
			return c, fmt.Errorf("the spec is written, but this machine's agent, which runs the continuous backups, did not start: %w", err)
		}
		say.Say("started this machine's agent: it records every change of the cluster into %s", s.BackupStoreDir(dir))
	}
	return c, nil
}

// checkEndpoints parses the endpoints: URLs of one scheme (http or https)
// with a host and port, each given once.
func checkEndpoints(raw []string) (eps []string, scheme string, err error) {
	for _, r := range raw {
		for _, e := range strings.Split(r, ",") {
			if e = strings.TrimSpace(e); e != "" && !slices.Contains(eps, e) {
				eps = append(eps, e)
			}
		}
	}
	if len(eps) == 0 {
		return nil, "", refusal.New(ErrEndpoint, "no endpoint: give the client URLs of the cluster's members")
	}
	for _, e := range eps {
		u, perr := url.Parse(e)
		if perr != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
			return nil, "", refusal.New(ErrEndpoint, "endpoint %q: want https://HOST:PORT (a member's client URL)", e)
		}
		if scheme != "" && u.Scheme != scheme {
			return nil, "", refusal.New(ErrEndpoint, "endpoints %s and %s: mixed http and https; a cluster serves its clients one way", eps[0], e)
		}
		scheme = u.Scheme
	}
	return eps, scheme, nil
}

func dial(eps []string, tc *tls.Config) (*clientv3.Client, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tc, DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, fmt.Errorf("etcd client for %v: %w", eps, err)
	}
	return cli, nil
}

// ask asks one endpoint for its status.
func ask(ctx context.Context, ep string, tc *tls.Config, timeout time.Duration) answer {
	a := answer{endpoint: ep}
	// A plain HTTPS request first: its error names a handshake that
	// failed, which a gRPC call would hide behind its deadline.
	if err := getVersion(ctx, ep, tc, timeout); err != nil {
		a.err = err
		return a
	}
	cli, err := dial([]string{ep}, tc)
	if err != nil {
		a.err = err
		return a
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cli.Status(ctx, ep)
	if err != nil {
		a.err = err
		return a
	}
	a.clusterID, a.memberID, a.version = st.Header.ClusterId, st.Header.MemberId, st.Version
	return a
}

// getVersion asks an endpoint for /version over its TLS configuration.
func getVersion(ctx context.Context, ep string, tc *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(ep, "/")+"/version", nil)
	if err != nil {
		return err
	}
	tr := &http.Transport{TLSClientConfig: tc}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err
		}
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /version: %s", resp.Status)
	}
	return nil
}

// judge refuses unless every endpoint answered, all with one cluster ID.
func judge(answers []answer) error {
	var certErrs, other []string
	for _, a := range answers {
		switch {
		case a.err == nil:
		case certProblem(a.err):
			certErrs = append(certErrs, fmt.Sprintf("%s: %v", a.endpoint, a.err))
		default:
			other = append(other, fmt.Sprintf("%s: %v", a.endpoint, a.err))
		}
	}
	if len(certErrs) > 0 {
		return refusal.New(ErrCertificate, "the certificate does not work against %s: the CA must be the one that signed the members' serving certificates, and the client certificate one the members trust", strings.Join(certErrs, "; "))
	}
	if len(other) > 0 {
		return refusal.New(ErrEndpoint, "no etcd answer from %s", strings.Join(other, "; "))
	}
	byID := map[uint64][]string{}
	for _, a := range answers {
		byID[a.clusterID] = append(byID[a.clusterID], a.endpoint)
	}
	if len(byID) > 1 {
		var parts []string
		for id, eps := range byID {
			parts = append(parts, fmt.Sprintf("cluster %x at %s", id, strings.Join(eps, ", ")))
		}
		sort.Strings(parts)
		return refusal.New(ErrMixedClusters, "the endpoints belong to %d different clusters: %s; attach one cluster at a time, with its own endpoints only", len(byID), strings.Join(parts, " and "))
	}
	return nil
}

// certProblem reports whether a dial or status error is the TLS handshake
// failing: an unknown authority, a name not covered, a certificate refused.
func certProblem(err error) bool {
	s := err.Error()
	for _, w := range []string{"certificate", "x509", "tls:", "handshake"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// externalSpec builds the spec of the attached cluster from etcd's member
// list: names, client and peer URLs as etcd has them, no agents, no data
// dirs; the version is the lowest any endpoint reported.
func externalSpec(o AttachOptions, answers []answer, list *clientv3.MemberListResponse, tlsOn bool) (*spec.Cluster, error) {
	id := fmt.Sprintf("%x", answers[0].clusterID)
	s := &spec.Cluster{
		Name:     o.Name,
		Token:    "attached-" + id,
		TLS:      spec.TLS{Disabled: !tlsOn},
		External: &spec.External{CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile, ClusterID: id},
	}
	for _, a := range answers {
		if a.version != "" && (s.Version == "" || versionLess(a.version, s.Version)) {
			s.Version = a.version
		}
	}
	given := map[uint64]string{}
	for _, a := range answers {
		given[a.memberID] = a.endpoint
	}
	for _, m := range list.Members {
		if m.Name == "" || len(m.PeerURLs) == 0 {
			return nil, refusal.New(ErrEndpoint, "member %x of cluster %s has not started yet (it has no name): attach once every member has joined", m.ID, id)
		}
		if m.IsLearner {
			return nil, refusal.New(ErrEndpoint, "member %s of cluster %s is a learner: attach once it is promoted", m.Name, id)
		}
		client := given[m.ID]
		if client == "" && len(m.ClientURLs) > 0 {
			client = m.ClientURLs[0]
		}
		s.Members = append(s.Members, spec.Member{Name: m.Name, ClientURL: client, PeerURL: m.PeerURLs[0]})
	}
	sort.SliceStable(s.Members, func(i, j int) bool { return s.Members[i].Name < s.Members[j].Name })
	return s, nil
}

// versionLess compares two etcd versions "3.M.P".
func versionLess(a, b string) bool {
	var am, ap, bm, bp int
	fmt.Sscanf(a, "3.%d.%d", &am, &ap)
	fmt.Sscanf(b, "3.%d.%d", &bm, &bp)
	return am < bm || (am == bm && ap < bp)
}
