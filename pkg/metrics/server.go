package metrics

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/spec"
)

// endpoint is what decides the metrics server: it restarts when any of
// these change in the spec.
type endpoint struct {
	cluster, address string
	tls              bool
	certDir          string
}

// Run serves agent's metrics at the metricsAddress the spec in dir gives
// it, until ctx ends. It reads the spec every few seconds (a host's agent
// gets its copy from the coordinator later, and an edit may move or turn
// off the endpoint) and restarts the server when its address changes. A
// failure to listen is logged and retried; it never stops the agent.
func Run(ctx context.Context, dir, agent string, log *slog.Logger) {
	g := &DirGatherer{Dir: dir, Agent: agent, Log: log}
	col := NewCollector(agent, g.Gather, log)
	var cur endpoint
	var stop func()
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	var lastErr string
	for {
		want := wanted(dir, agent)
		if want != cur || stop == nil && want.address != "" {
			if stop != nil {
				stop()
				stop = nil
				log.Info("metrics server stopped", "address", cur.address)
			}
			cur = want
			if want.address != "" {
				var err error
				stop, err = start(want, agent, col, log)
				if err != nil {
					if err.Error() != lastErr {
						log.Warn("metrics server", "address", want.address, "err", err)
						lastErr = err.Error()
					}
				} else {
					lastErr = ""
					log.Info("serving metrics", "address", want.address, "tls", want.tls)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// wanted reads the agent's metrics endpoint from the spec in dir (none
// without a spec or without a metricsAddress).
func wanted(dir, agent string) endpoint {
	s, err := spec.Load(filepath.Join(dir, spec.FileName))
	if err != nil {
		return endpoint{}
	}
	a, ok := s.Agent(agent)
	if !ok || a.MetricsAddress == "" {
		return endpoint{}
	}
	return endpoint{cluster: s.Name, address: a.MetricsAddress, tls: s.MetricsTLS(*a), certDir: s.CertDir(dir)}
}

// start listens on e.address and serves a fresh registry there; stop
// closes the server.
func start(e endpoint, agent string, col *Collector, log *slog.Logger) (stop func(), err error) {
	reg, err := NewRegistry(e.cluster, agent, col)
	if err != nil {
		return nil, err
	}
	var tlsConf *tls.Config
	if e.tls {
		if tlsConf, err = ServingTLS(e.certDir); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", e.address)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	srv := Server(reg, tlsConf, log)
	go func() {
		var err error
		if tlsConf != nil {
			err = srv.ServeTLS(l, "", "")
		} else {
			err = srv.Serve(l)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "address", e.address, "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// Server is the HTTP server of a registry: /metrics, and a pointer to it at /.
func Server(reg *prometheus.Registry, tlsConf *tls.Config, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:     promhttp.ContinueOnError,
		Timeout:           scrapeTimeout + time.Second,
		EnableOpenMetrics: true,
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		_, _ = fmt.Fprintln(w, "Steward agent metrics: /metrics")
	})
	return &http.Server{Handler: mux, TLSConfig: tlsConf, ReadHeaderTimeout: 10 * time.Second}
}

// ServingTLS is the metrics server's TLS: the agent's own certificate on a
// joined host (agent.crt, naming the host's address), else the members'
// server certificate (server.crt), both issued by the cluster CA. The pair
// is read at each handshake, so a renewed certificate is served at once.
// No client certificate is asked for: metrics carry no secret.
func ServingTLS(certDir string) (*tls.Config, error) {
	cert, key := filepath.Join(certDir, "agent.crt"), filepath.Join(certDir, "agent.key")
	if _, err := os.Stat(cert); err != nil {
		cert, key = filepath.Join(certDir, pki.ServerCert), filepath.Join(certDir, pki.ServerKey)
	}
	if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
		return nil, fmt.Errorf("metrics TLS certificate: %w", err)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(cert, key)
			return &c, err
		},
	}, nil
}
