package kubeupgrade

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/etcd-steward/steward/pkg/catalogue"
	"github.com/etcd-steward/steward/pkg/cluster"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/kubeversion"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/status"
)

// CertMargin is how long every certificate must stay valid for an
// upgrade to start: past the plan's end, which a day covers.
const CertMargin = 24 * time.Hour

// PlanOptions are the dry run's inputs beyond the cluster.
type PlanOptions struct {
	Target string
	// Prefix is the API servers' --etcd-prefix (kstorage.DefaultPrefix).
	Prefix string
	// Now is the time certificates are checked at (time.Now when zero).
	Now time.Time
}

// Plan gathers what the dry run needs, from Kubernetes (cfg) and from
// the etcd cluster beneath (c), and computes it. A target not in the
// catalogue is refused before anything is read; every other problem is
// a failed pre-flight check in the plan (Plan.Refusal). Nothing changes.
func Plan(ctx context.Context, c *cluster.Cluster, cfg *rest.Config, o PlanOptions) (*kubeversion.Plan, error) {
	if _, _, err := kubeversion.TargetOf(o.Target); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = kstorage.DefaultPrefix
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	run, err := Observe(ctx, cs)
	if err != nil {
		return nil, err
	}
	in := kubeversion.Inputs{Target: o.Target, Instances: run.Instances, EtcdVersions: map[string]string{}}
	var nodes []string
	for _, x := range run.Instances {
		nodes = append(nodes, x.Host)
	}
	in.Leaders = leaders(ctx, cs, nodes)
	if in.Etcd, err = catalogue.Load(filepath.Join(c.Dir, catalogue.FileName)); err != nil {
		return nil, err
	}
	base, err := kstorage.LoadRemoved(filepath.Join(c.Dir, kstorage.RemovedFileName))
	if err != nil {
		return nil, err
	}
	in.Removed = kubeversion.Catalogue(base)

	// etcd: members, alarms, versions.
	st, err := status.Get(ctx, c)
	if err != nil {
		return nil, err
	}
	// A member slow to answer once (each has 2 s: a loaded machine) is
	// looked at again before the upgrade is refused: three looks, 2 s
	// apart; a member really down is down at each.
	for look := 1; look < 3 && etcdHealth(st).Result == kubeversion.Fail; look++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
		if st, err = status.Get(ctx, c); err != nil {
			return nil, err
		}
	}
	for _, m := range st.Members {
		if m.Version != "" {
			in.EtcdVersions[m.Name] = m.Version
		}
	}
	in.Health = append(in.Health, etcdHealth(st), alarms(st))
	if st.Cluster.Quorate {
		kv, err := c.Client()
		if err != nil {
			return nil, err
		}
		inv := kstorage.NewInventory(o.Prefix)
		_, err = kstorage.ScanLive(ctx, kv, inv, kstorage.DefaultPageSize)
		kv.Close()
		if err != nil {
			return nil, fmt.Errorf("storage-version inventory: %w", err)
		}
		rep := inv.Report(kstorage.Source{Type: "cluster", Cluster: c.Spec.Name})
		in.Stored = &rep
	}

	// Every API server's /readyz and the certificate it serves.
	ready, served := readyz(ctx, cfg, run.APIServers)
	in.Health = append(in.Health, ready)
	certs, err := status.Certificates(ctx, c)
	if err != nil {
		return nil, err
	}
	in.Health = append(in.Health, certificates(certs, served, o.Now))
	return kubeversion.BuildPlan(in)
}

func etcdHealth(st *status.Status) kubeversion.Check {
	ck := kubeversion.Check{Name: "etcd-health", Result: kubeversion.Pass}
	var bad []string
	for _, m := range st.Members {
		if !m.Healthy && !m.OnlyAlarms {
			why := m.LastError
			if why == "" {
				why = "not healthy"
			}
			bad = append(bad, fmt.Sprintf("member %s: %s", m.Name, why))
		}
	}
	if len(bad) > 0 || !st.Cluster.Quorate {
		ck.Result, ck.Kind = kubeversion.Fail, kubeversion.ErrUnhealthy
		ck.Message = fmt.Sprintf("%d of %d etcd members healthy (%s): bring every member back first", st.Cluster.HealthyMembers, len(st.Members), strings.Join(bad, "; "))
		return ck
	}
	ck.Message = fmt.Sprintf("%d of %d etcd members healthy", st.Cluster.HealthyMembers, len(st.Members))
	return ck
}

func alarms(st *status.Status) kubeversion.Check {
	ck := kubeversion.Check{Name: "alarms", Result: kubeversion.Pass, Message: "no etcd alarm raised"}
	var raised []string
	for _, m := range st.Members {
		for _, a := range m.Alarms {
			raised = append(raised, fmt.Sprintf("%s on member %s", a, m.Name))
		}
	}
	if len(raised) > 0 {
		ck.Result, ck.Kind = kubeversion.Fail, kubeversion.ErrUnhealthy
		ck.Message = fmt.Sprintf("etcd alarms raised: %s: clear their cause and disarm them first", strings.Join(raised, ", "))
	}
	return ck
}

// servedCert is an API server's serving certificate's expiry.
type servedCert struct {
	host     string
	notAfter time.Time
}

// readyz asks every API server's /readyz (through the kubeconfig's
// credentials, at the server's own address rather than the load
// balancer's), concurrently, 10 s each.
func readyz(ctx context.Context, cfg *rest.Config, apis []APIServer) (kubeversion.Check, []servedCert) {
	ck := kubeversion.Check{Name: "apiservers-ready", Result: kubeversion.Pass}
	if len(apis) == 0 {
		ck.Result, ck.Kind = kubeversion.Fail, kubeversion.ErrUnhealthy
		ck.Message = "no kube-apiserver static pod found"
		return ck, nil
	}
	type result struct {
		err  error
		cert time.Time
	}
	res := make([]result, len(apis))
	var wg sync.WaitGroup
	for i, a := range apis {
		wg.Go(func() {
			res[i].cert, res[i].err = readyzOne(ctx, cfg, a.URL)
		})
	}
	wg.Wait()
	var bad []string
	var served []servedCert
	for i, a := range apis {
		if res[i].err != nil {
			bad = append(bad, fmt.Sprintf("host %s: kube-apiserver %s/readyz: %v", a.Host, a.URL, res[i].err))
			continue
		}
		served = append(served, servedCert{a.Host, res[i].cert})
	}
	if len(bad) > 0 {
		ck.Result, ck.Kind = kubeversion.Fail, kubeversion.ErrUnhealthy
		ck.Message = strings.Join(bad, "; ") + ": every API server must be ready before one is restarted"
		return ck, served
	}
	ck.Message = fmt.Sprintf("%d of %d API servers ready (/readyz)", len(apis), len(apis))
	return ck, served
}

func readyzOne(ctx context.Context, cfg *rest.Config, url string) (time.Time, error) {
	c := rest.CopyConfig(cfg)
	c.Host = url
	rt, err := rest.TransportFor(c)
	if err != nil {
		return time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return time.Time{}, err
	}
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	var notAfter time.Time
	if resp.TLS != nil && len(resp.TLS.PeerCertificates) > 0 {
		notAfter = resp.TLS.PeerCertificates[0].NotAfter
	}
	if resp.StatusCode != http.StatusOK {
		return notAfter, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return notAfter, nil
}

// certificates: every etcd certificate (files and served) and every API
// server's serving certificate valid past now+CertMargin.
func certificates(etcd []pki.CertInfo, served []servedCert, now time.Time) kubeversion.Check {
	ck := kubeversion.Check{Name: "certificates", Result: kubeversion.Pass}
	limit := now.Add(CertMargin)
	var bad []string
	n := 0
	for _, c := range etcd {
		if c.NotAfter.IsZero() {
			continue
		}
		n++
		if c.NotAfter.Before(limit) {
			where := c.File
			if where == "" {
				where = c.Endpoint
			}
			bad = append(bad, fmt.Sprintf("etcd %s (%s) expires %s", c.Name, where, c.NotAfter.UTC().Format(time.RFC3339)))
		}
	}
	for _, s := range served {
		if s.notAfter.IsZero() {
			continue
		}
		n++
		if s.notAfter.Before(limit) {
			bad = append(bad, fmt.Sprintf("host %s: kube-apiserver's serving certificate expires %s", s.host, s.notAfter.UTC().Format(time.RFC3339)))
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		ck.Result, ck.Kind = kubeversion.Fail, kubeversion.ErrUnhealthy
		ck.Message = fmt.Sprintf("certificates expire within %s: %s: renew them first", CertMargin, strings.Join(bad, "; "))
		return ck
	}
	ck.Message = fmt.Sprintf("%d certificates valid past %s", n, limit.UTC().Format(time.RFC3339))
	return ck
}
