package agentapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/memberrt"
	"github.com/etcd-steward/steward/pkg/recoverycount"
)

var _ memberrt.Runtime = (*Client)(nil)

// ErrUnreachable means the agent did not answer: it is not running, or its
// socket is stale. It wraps memberrt.ErrUnreachable, so an operation that
// reaches members through the runtime seam matches it there.
var ErrUnreachable = fmt.Errorf("agent %w", memberrt.ErrUnreachable)

// Client talks to one agent. It is the first runtime of members
// (memberrt.Runtime): the agent runs them as processes on its host.
type Client struct {
	address string
	// name and host name a remote agent in errors; empty for a local one
	// (its socket address says enough).
	name, host string
	base       string
	hc         *http.Client
}

// UnreachableError is a remote agent that did not answer. It wraps
// ErrUnreachable. The command adds what to check (that the agent runs
// there, that this machine reaches it: cli.LibraryAdvice, after each one
// in an error).
type UnreachableError struct {
	Agent, Host, Address string
	Err                  error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("agent %s on host %s unreachable at %s: %v", e.Agent, e.Host, e.Address, e.Err)
}

// Short says the same without the advice (status tables).
func (e *UnreachableError) Short() string {
	return fmt.Sprintf("host %s (%s) unreachable: %v", e.Agent, e.Host, e.Err)
}

func (e *UnreachableError) Unwrap() []error { return []error{ErrUnreachable, e.Err} }

// NewClient returns a client for an agent address: unix:///path/agent.sock.
func NewClient(address string) (*Client, error) {
	sock, ok := strings.CutPrefix(address, "unix://")
	if !ok {
		return nil, fmt.Errorf("agent address %q: only unix:// addresses are supported in this version", address)
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}
	return &Client{address: address, base: "http://agent", hc: &http.Client{Transport: tr}}, nil
}

// NewRemoteClient returns a client for the agent name on another host, at
// https://HOST:PORT over mutual TLS (tc: pki.AgentClientTLS).
func NewRemoteClient(name, host, address string, tc *tls.Config) (*Client, error) {
	if !strings.HasPrefix(address, "https://") {
		return nil, fmt.Errorf("agent %s address %q: want https://HOST:PORT", name, address)
	}
	tr := &http.Transport{
		TLSClientConfig:     tc,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{
		address: address, name: name, host: host,
		base: strings.TrimRight(address, "/"), hc: &http.Client{Transport: tr},
	}, nil
}

// Address returns the agent address.
func (c *Client) Address() string { return c.address }

// Info returns the agent's description.
func (c *Client) Info(ctx context.Context) (AgentInfo, error) {
	var out AgentInfo
	return out, c.do(ctx, http.MethodGet, "/v1/agent", nil, &out)
}

// Members lists the members the agent runs.
func (c *Client) Members(ctx context.Context) ([]MemberStatus, error) {
	var out []MemberStatus
	return out, c.do(ctx, http.MethodGet, "/v1/members", nil, &out)
}

// Member returns one member's status.
func (c *Client) Member(ctx context.Context, name string) (MemberStatus, error) {
	var out MemberStatus
	return out, c.do(ctx, http.MethodGet, "/v1/members/"+name, nil, &out)
}

// PutMember stores a member's config without starting it.
func (c *Client) PutMember(ctx context.Context, cfg MemberConfig) (MemberStatus, error) {
	var out MemberStatus
	return out, c.do(ctx, http.MethodPut, "/v1/members/"+cfg.Name, cfg, &out)
}

// DeleteMember stops a member and forgets it. Its data dir is kept.
func (c *Client) DeleteMember(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/members/"+name, nil, nil)
}

// DeleteMemberAside stops a member, forgets it and moves its data dir aside
// on the agent's host; it returns where the data dir went.
func (c *Client) DeleteMemberAside(ctx context.Context, name, reason string) (string, error) {
	var out Aside
	return out.Aside, c.do(ctx, http.MethodDelete, "/v1/members/"+name+"?aside="+url.QueryEscape(reason), nil, &out)
}

// MoveDataDirAside moves a stopped member's data dir aside on the agent's
// host and returns where it went.
func (c *Client) MoveDataDirAside(ctx context.Context, name, reason string) (string, error) {
	var out Aside
	return out.Aside, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/datadir/aside", AsideRequest{Reason: reason}, &out)
}

// DataDir inspects a member's data dir on the agent's host, as JSON
// (package datadir's Finding).
func (c *Client) DataDir(ctx context.Context, name string, out any) error {
	return c.do(ctx, http.MethodGet, "/v1/members/"+name+"/datadir", nil, out)
}

// StageDataDir sends the snapshot at path to stage a data dir for a stopped
// member on the agent's host; it returns the staged dir.
func (c *Client) StageDataDir(ctx context.Context, name, snapshot string, to memberrt.StageTarget) (string, error) {
	f, err := os.Open(snapshot)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	hdr, err := json.Marshal(StageRequest{InitialCluster: to.InitialCluster, MemberIDs: to.MemberIDs, ClusterID: to.ClusterID, Version: to.Version, SHA256: hex.EncodeToString(h.Sum(nil))})
	if err != nil {
		return "", err
	}
	var out Staged
	err = c.doBody(ctx, http.MethodPut, "/v1/members/"+name+"/datadir/stage", f, map[string]string{"X-Steward-Stage": string(hdr)}, &out)
	return out.Staged, err
}

// CommitDataDir puts a staged data dir in place of the member's (the old
// one moved aside) and returns where the old one went.
func (c *Client) CommitDataDir(ctx context.Context, name, staged string) (string, error) {
	var out Aside
	return out.Aside, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/datadir/commit", Staged{Staged: staged}, &out)
}

// DiscardStaged removes a data dir the agent staged.
func (c *Client) DiscardStaged(ctx context.Context, name, staged string) error {
	return c.do(ctx, http.MethodPost, "/v1/members/"+name+"/datadir/discard", Staged{Staged: staged}, nil)
}

// Applied reads a stopped member's applied and committed index.
func (c *Client) Applied(ctx context.Context, name string) (AppliedIndex, error) {
	var out AppliedIndex
	return out, c.do(ctx, http.MethodGet, "/v1/members/"+name+"/datadir/applied", nil, &out)
}

// FetchDatabase copies a stopped member's database to the local file dst
// (0600, created: dst must not exist), checked against the SHA-256 the
// agent sends; on any failure dst is removed.
func (c *Client) FetchDatabase(ctx context.Context, name, dst string) (err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/v1/members/"+name+"/datadir/db", nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if c.name != "" {
			return &UnreachableError{Agent: c.name, Host: c.host, Address: c.address, Err: unwrapURL(err)}
		}
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, c.address, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		var e Error
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return &APIError{Status: resp.StatusCode, Message: e.Error}
		}
		return &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	want := resp.Header.Get("X-Steward-SHA256")
	if len(want) != 64 {
		return fmt.Errorf("agent %s: the database of %s came without its SHA-256", c.address, name)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			os.Remove(dst)
		}
	}()
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), resp.Body)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("agent %s: receive the database of %s: %w", c.address, name, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("agent %s: the database of %s arrived with SHA-256 %s, not %s", c.address, name, got, want)
	}
	return nil
}

// Kept lists the kept copies of data dirs on the agent's host, as JSON
// (package datadir's []Kept). An agent older than the endpoint answers
// 404.
func (c *Client) Kept(ctx context.Context, out any) error {
	return c.do(ctx, http.MethodGet, "/v1/kept", nil, out)
}

// RemoveKept removes one kept copy of a data dir on the agent's host.
func (c *Client) RemoveKept(ctx context.Context, path string) error {
	return c.do(ctx, http.MethodPost, "/v1/kept/remove", KeptPath{Path: path}, nil)
}

// FreePort asks for a free TCP port on a member's host address.
func (c *Client) FreePort(ctx context.Context, name string) (int, error) {
	var out Port
	return out.Port, c.do(ctx, http.MethodGet, "/v1/members/"+name+"/freeport", nil, &out)
}

// Start starts a member and keeps it running.
func (c *Client) Start(ctx context.Context, name string) (MemberStatus, error) {
	var out MemberStatus
	return out, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/start", nil, &out)
}

// Stop stops a member gracefully and keeps it stopped.
func (c *Client) Stop(ctx context.Context, name string) (MemberStatus, error) {
	var out MemberStatus
	return out, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/stop", nil, &out)
}

// Kill stops a member at once with SIGKILL and keeps it stopped: no
// graceful close, so it does not wait for clients' streams. Its next start
// replays its WAL.
func (c *Client) Kill(ctx context.Context, name string) (MemberStatus, error) {
	var out MemberStatus
	return out, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/kill", nil, &out)
}

// Restart stops and starts a member.
func (c *Client) Restart(ctx context.Context, name string) (MemberStatus, error) {
	var out MemberStatus
	return out, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/restart", nil, &out)
}

// SwapVersion runs a member on another etcd version.
func (c *Client) SwapVersion(ctx context.Context, name string, req VersionRequest) (MemberStatus, error) {
	var out MemberStatus
	return out, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/version", req, &out)
}

// CheckBinary asks whether the agent's host can run etcd version.
func (c *Client) CheckBinary(ctx context.Context, version string) (BinaryCheck, error) {
	var out BinaryCheck
	return out, c.do(ctx, http.MethodGet, "/v1/binaries/"+url.PathEscape(version), nil, &out)
}

// ErrNotServed: the agent does not serve the endpoint asked (an agent
// older than it). Callers report what it would have said as unknown.
var ErrNotServed = errors.New("the agent does not serve this (an older steward)")

// ListBinaries asks for the versions in the agent's binary store with the
// SHA-256 their manifests record (GET /v1/binaries). An agent older than
// the endpoint answers 404: the error wraps ErrNotServed.
func (c *Client) ListBinaries(ctx context.Context) (BinaryList, error) {
	var out BinaryList
	err := c.do(ctx, http.MethodGet, "/v1/binaries", nil, &out)
	var ae *APIError
	if errors.As(err, &ae) && (ae.Status == http.StatusNotFound || ae.Status == http.StatusMethodNotAllowed) {
		return out, fmt.Errorf("%w: %w", ErrNotServed, err)
	}
	return out, err
}

var errRequestEnded = errors.New("request ended")

// PushBinary makes etcd version of the local store available to the agent:
// it sends the version's bundle (PUT /v1/binaries/{version}; the agent
// checks every file against the SHA-256 of store's manifest and stores it
// only when all verify). When the agent's check already finds a verified
// copy of the same etcd, nothing is sent and the result is PushPresent.
func (c *Client) PushBinary(ctx context.Context, store *binaries.Store, version string) (BinaryPush, error) {
	return c.pushBinary(ctx, store, version, false)
}

// PushBinaryReplacing is PushBinary that replaces a different etcd the
// agent stores under the version (another build), or a damaged copy, with
// the local one (PUT /v1/binaries/{version}?replace=true; the agent moves
// its old directory aside). An agent older than the parameter ignores it
// and refuses the different copy as before.
func (c *Client) PushBinaryReplacing(ctx context.Context, store *binaries.Store, version string) (BinaryPush, error) {
	return c.pushBinary(ctx, store, version, true)
}

func (c *Client) pushBinary(ctx context.Context, store *binaries.Store, version string, replace bool) (BinaryPush, error) {
	v, err := binaries.NormalizeVersion(version)
	if err != nil {
		return BinaryPush{}, err
	}
	sums, err := store.Sums(v)
	if err != nil {
		return BinaryPush{}, err
	}
	check, err := c.CheckBinary(ctx, v)
	if err != nil {
		return BinaryPush{}, err
	}
	if check.Problem == "" && check.Files["etcd"] == sums["etcd"] {
		tools := make([]string, 0, len(check.Files))
		for _, t := range []string{"etcd", "etcdctl", "etcdutl"} {
			if check.Files[t] != "" {
				tools = append(tools, t)
			}
		}
		return BinaryPush{Version: v, Store: check.Store, Binary: check.Binary, Tools: tools, Result: PushPresent}, nil
	}

	pr, pw := io.Pipe()
	written := make(chan error, 1)
	go func() {
		_, err := store.WriteBundle(pw, v)
		pw.CloseWithError(err)
		written <- err
	}()
	var out BinaryPush
	path := "/v1/binaries/" + url.PathEscape(v)
	if replace {
		path += "?replace=true"
	}
	err = c.send(ctx, http.MethodPut, path, "application/x-tar", pr, &out)
	// The transport may stop reading early (an answer before the end, a
	// broken connection): unblock the writer.
	pr.CloseWithError(errRequestEnded)
	if werr := <-written; werr != nil && err != nil && !errors.Is(werr, errRequestEnded) {
		// The local store failed first: say so, not that the agent did.
		return BinaryPush{}, fmt.Errorf("send etcd %s from %s: %w", v, store.Dir, werr)
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.Status == http.StatusMethodNotAllowed {
		return BinaryPush{}, fmt.Errorf("the agent takes no pushed binaries (%w): run the same steward version there as here", err)
	}
	return out, err
}

// CheckV2Store runs etcd's v2 store check (version's etcdutl) on a copy of
// a member's data dir on its host.
func (c *Client) CheckV2Store(ctx context.Context, name, version string) (V2StoreCheck, error) {
	var out V2StoreCheck
	return out, c.do(ctx, http.MethodPost, "/v1/members/"+name+"/check-v2store", V2StoreRequest{Version: version}, &out)
}

// PutCluster hands the agent the cluster spec and backup secrets.
func (c *Client) PutCluster(ctx context.Context, f ClusterFiles) error {
	return c.do(ctx, http.MethodPut, "/v1/cluster", f, nil)
}

// PutRecoveryCounts hands the agent the automatic recovery's counts of
// one recording directory (a coordinator's), merged into those it keeps
// (MergeRecoveryCounts) and exported by its metrics.
func (c *Client) PutRecoveryCounts(ctx context.Context, rc recoverycount.Counts) error {
	return c.do(ctx, http.MethodPut, "/v1/recovery-counts", rc, nil)
}

// BackupStatuses returns the backup loop reports on the agent's host, as
// written (package backup's LoopStatus).
func (c *Client) BackupStatuses(ctx context.Context) ([]json.RawMessage, error) {
	var out []json.RawMessage
	return out, c.do(ctx, http.MethodGet, "/v1/backup/status", nil, &out)
}

// HostCert returns the current certificate name (server, peer, agent,
// client) of a joined host, PEM-encoded.
func (c *Client) HostCert(ctx context.Context, name string) (CertFile, error) {
	var out CertFile
	return out, c.do(ctx, http.MethodGet, "/v1/certs/"+name, nil, &out)
}

// PutHostCert hands a joined host's agent the renewal of its certificate
// name (PEM), which the agent checks against its key and the CA and
// installs, keeping the previous one beside it.
func (c *Client) PutHostCert(ctx context.Context, name string, certPEM []byte) (CertRenewal, error) {
	var out CertRenewal
	return out, c.send(ctx, http.MethodPut, "/v1/certs/"+name, "application/x-pem-file", bytes.NewReader(certPEM), &out)
}

// ForgetPreviousHostCert drops the previous certificate name the agent
// kept beside a renewal (once the coordinator saw the new one served).
func (c *Client) ForgetPreviousHostCert(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/certs/"+name+"/prev", nil, nil)
}

// PutTrustBundle hands a joined host's agent the coordinator's trust
// bundle (ca.crt, PEM), which the agent checks against the host's leaves
// and the caller's certificate and installs as the host's ca.crt.
func (c *Client) PutTrustBundle(ctx context.Context, bundlePEM []byte) (TrustBundle, error) {
	var out TrustBundle
	return out, c.send(ctx, http.MethodPut, "/v1/ca", "application/x-pem-file", bytes.NewReader(bundlePEM), &out)
}

// Shutdown stops every member and the agent.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/shutdown", nil, nil)
}

// Ping reports whether the agent answers within d.
func (c *Client) Ping(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_, err := c.Info(ctx)
	return err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	hdr := map[string]string{}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
		hdr["Content-Type"] = "application/json"
	}
	return c.doBody(ctx, method, path, body, hdr, out)
}

// send sends a request with a body of contentType (none when body is nil)
// and decodes the JSON answer into out.
func (c *Client) send(ctx context.Context, method, path, contentType string, body io.Reader, out any) error {
	hdr := map[string]string{}
	if body != nil {
		hdr["Content-Type"] = contentType
	}
	return c.doBody(ctx, method, path, body, hdr, out)
}

// doBody sends body (any stream) with headers and decodes a JSON answer.
func (c *Client) doBody(ctx context.Context, method, path string, body io.Reader, hdr map[string]string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if c.name != "" {
			return &UnreachableError{Agent: c.name, Host: c.host, Address: c.address, Err: unwrapURL(err)}
		}
		return fmt.Errorf("%w at %s: %v", ErrUnreachable, c.address, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("agent %s: read response: %w", c.address, err)
	}
	if resp.StatusCode >= 300 {
		var e Error
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return &APIError{Status: resp.StatusCode, Message: e.Error}
		}
		return &APIError{Status: resp.StatusCode, Message: strings.TrimSpace(string(b))}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("agent %s: decode response: %w", c.address, err)
		}
	}
	return nil
}

// unwrapURL drops net/http's "Get \"URL\":" prefix, which repeats the address.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// APIError is an error the agent returned.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return e.Message }

// Is makes the agent's 404 match memberrt.ErrNotFound: the agent does not
// know the member.
func (e *APIError) Is(target error) bool {
	return target == memberrt.ErrNotFound && e.Status == http.StatusNotFound
}

// KubeManifest returns the host's static pod manifest name (NAME.yaml in
// the agent's --kube-manifests directory).
func (c *Client) KubeManifest(ctx context.Context, name string) (KubeManifest, error) {
	var out KubeManifest
	return out, c.do(ctx, http.MethodGet, "/v1/kube/manifests/"+name, nil, &out)
}

// PutKubeManifest writes the host's static pod manifest name atomically,
// the previous one kept for plan until DeleteKubeManifestsKept.
func (c *Client) PutKubeManifest(ctx context.Context, name, plan string, content []byte) (KubeManifestWrite, error) {
	var out KubeManifestWrite
	return out, c.send(ctx, http.MethodPut, "/v1/kube/manifests/"+name+"?plan="+url.QueryEscape(plan), "application/yaml", bytes.NewReader(content), &out)
}

// KubeManifestKept returns the host's static pod manifest name as it was
// before plan first wrote it; ok is false when nothing of it was kept for
// the plan (the agent answers 404).
func (c *Client) KubeManifestKept(ctx context.Context, plan, name string) (m KubeManifest, ok bool, err error) {
	err = c.do(ctx, http.MethodGet, "/v1/kube/kept/"+url.PathEscape(plan)+"/"+url.PathEscape(name), nil, &m)
	if ae, isAPI := errors.AsType[*APIError](err); isAPI && ae.Status == http.StatusNotFound {
		return KubeManifest{}, false, nil
	}
	return m, err == nil, err
}

// DeleteKubeManifestsKept removes the manifests kept for plan (once the
// plan is done).
func (c *Client) DeleteKubeManifestsKept(ctx context.Context, plan string) error {
	return c.do(ctx, http.MethodDelete, "/v1/kube/kept/"+url.PathEscape(plan), nil, nil)
}
