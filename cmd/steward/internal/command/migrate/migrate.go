// Package migrate is the `steward migrate` command: rewrite what
// Kubernetes stores so that it is in the current storage version.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/kmigrate"
)

// NewCommand returns the migrate command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Rewrite Kubernetes objects in their current storage version"}
	cmd.AddCommand(storageCommand(g))
	return cmd
}

type options struct {
	kubeconfig, context string
	resources           []string
	all, auto           bool
	qps                 float64
	workers             int
	chunkSize           int64
	metricsAddr         string
	protobuf            bool
}

func storageCommand(g *cli.Globals) *cobra.Command {
	var o options
	cmd := &cobra.Command{
		Use:   "storage",
		Short: "Rewrite every object of resources through the API server in the current storage version and encryption key",
		Long: `Rewrite every object of the selected resources through the Kubernetes API
server with an update that changes nothing, so that the API server stores it
again in the resource's current storage version and under the current
encryption-at-rest key. Run it after a Kubernetes upgrade that changed storage
versions, and after enabling or rotating encryption at rest.

Resources are migrated one at a time, listed in chunks of 500 whose continue
token is saved in DIR/migrate.db after each chunk: a run that was killed or
interrupted resumes where it stopped when run again. Before anything is
changed, the API server must answer, every named resource must exist, and the
credentials must allow list, get and update on every selected resource.

--auto migrates only the resources whose storageVersionHash (from discovery)
differs from the one recorded at their last complete migration.

Exit status 0 only when every selected resource was migrated (or, with
--auto, was up to date); objects the API server refused are listed in the
summary and make the exit status 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := run(cmd, g, o); err != nil {
				return fmt.Errorf("migrate storage: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server and credentials (default $KUBECONFIG)")
	f.StringVar(&o.context, "context", "", "kubeconfig context (default: its current context)")
	f.StringSliceVar(&o.resources, "resources", nil, "resources to migrate, comma-separated: configmaps,deployments.apps,widgets.example.com")
	f.BoolVar(&o.all, "all", false, "migrate every resource the API server stores that allows list and update (events excepted)")
	f.BoolVar(&o.auto, "auto", false, "migrate only resources whose storageVersionHash changed since their last complete migration (of --resources, else of all)")
	f.Float64Var(&o.qps, "qps", kmigrate.DefaultQPS, "most requests per second to the API server, all workers together (0: no limit)")
	f.IntVar(&o.workers, "workers", kmigrate.DefaultWorkers, "concurrent updates")
	f.Int64Var(&o.chunkSize, "chunk-size", kmigrate.DefaultChunkSize, "objects per list request")
	f.StringVar(&o.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address (host:port) at /metrics while migrating (default: off)")
	f.BoolVar(&o.protobuf, "protobuf", true, "read and write built-in resources in protobuf (false: JSON, as custom resources always are)")
	return cmd
}

func run(cmd *cobra.Command, g *cli.Globals, o options) error {
	if err := g.CheckOutput(); err != nil {
		return err
	}
	// The selection and rate flags are checked here, in the flags' names;
	// kmigrate.Run checks its Options again (kmigrate.ErrOptions, in the
	// fields' names).
	if o.all && len(o.resources) > 0 {
		return errors.New("--all and --resources select resources twice: give one")
	}
	if !o.all && !o.auto && len(o.resources) == 0 {
		return errors.New("name the resources to migrate (--resources configmaps,deployments.apps) or select them all (--all)")
	}
	if o.workers < 1 || o.qps < 0 || o.chunkSize < 1 {
		return errors.New("--workers and --chunk-size must be at least 1, --qps at least 0")
	}
	if o.kubeconfig == "" {
		o.kubeconfig = os.Getenv("KUBECONFIG")
	}
	if o.kubeconfig == "" {
		return errors.New("--kubeconfig is required: the kubeconfig of the API server to migrate through")
	}
	if strings.Contains(o.kubeconfig, string(os.PathListSeparator)) {
		return fmt.Errorf("kubeconfig %q: give one file", o.kubeconfig)
	}
	if _, err := os.Stat(o.kubeconfig); err != nil {
		return fmt.Errorf("kubeconfig %s: %w", o.kubeconfig, err)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
		&clientcmd.ClientConfigLoadingRules{ExplicitPath: o.kubeconfig},
		&clientcmd.ConfigOverrides{CurrentContext: o.context}).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w", o.kubeconfig, err)
	}
	dir, err := g.StewardDir()
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second signal kills as usual

	stderr := cmd.ErrOrStderr()
	var metrics *kmigrate.Metrics
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		metrics = kmigrate.NewMetrics(reg)
		shutdown, err := serveMetrics(o.metricsAddr, reg)
		if err != nil {
			return err
		}
		defer shutdown()
	}
	rep, err := kmigrate.Run(ctx, kmigrate.Options{
		Config:     cfg,
		Kubeconfig: o.kubeconfig,
		Resources:  o.resources,
		All:        o.all,
		Auto:       o.auto,
		QPS:        o.qps,
		Workers:    o.workers,
		ChunkSize:  o.chunkSize,
		JSON:       !o.protobuf,
		Dir:        dir,
		Progress:   stderr,
		Terminal:   isTerminal(stderr),
		Metrics:    metrics,
		Log:        slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if rep != nil {
		if perr := g.Print(cmd.OutOrStdout(), rep, func(tw *tabwriter.Writer) { table(tw, rep) }); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

// serveMetrics serves reg at http://addr/metrics until shutdown is called.
func serveMetrics(addr string, reg *prometheus.Registry) (shutdown func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func table(w io.Writer, rep *kmigrate.Report) {
	fmt.Fprintf(w, "API server %s, state in %s\n\n", rep.Server, rep.StateFile)
	fmt.Fprintln(w, "RESOURCE\tVERSION\tRESULT\tMIGRATED\tSKIPPED\tFAILED\tTHIS RUN\tRESUMED\tDURATION")
	for _, r := range rep.Resources {
		resumed := "no"
		if r.Resumed {
			resumed = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", r.Resource, r.Version, r.Result, r.Migrated, r.Skipped, r.Failed,
			r.ThisRun.Migrated, resumed, r.Duration.Round(time.Millisecond))
	}
	t := rep.Totals
	fmt.Fprintf(w, "TOTAL (%d resources)\t\t\t%d\t%d\t%d\t%d\t\t%s\n", t.Resources, t.Migrated, t.Skipped, t.Failed, t.ThisRun.Migrated, rep.Duration.Round(time.Millisecond))
	var failed, errs bool
	for _, r := range rep.Resources {
		failed = failed || len(r.Failures) > 0
		errs = errs || r.Error != ""
	}
	if errs {
		fmt.Fprintln(w)
		for _, r := range rep.Resources {
			if r.Error != "" {
				fmt.Fprintf(w, "%s: %s\n", r.Resource, r.Error)
			}
		}
	}
	if failed {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "REFUSED OBJECTS\tNAMESPACE\tNAME\tCODE\tREASON")
		for _, r := range rep.Resources {
			for _, f := range r.Failures {
				ns := f.Namespace
				if ns == "" {
					ns = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", r.Resource, ns, f.Name, f.Code, f.Reason)
			}
			if int64(len(r.Failures)) < r.Failed {
				fmt.Fprintf(w, "%s\t(%d more)\t\t\t\n", r.Resource, r.Failed-int64(len(r.Failures)))
			}
		}
	}
	if len(rep.Excluded) > 0 {
		fmt.Fprintf(w, "\nLeft out by --all: %d resources (-o json lists them and why)\n", len(rep.Excluded))
	}
}
