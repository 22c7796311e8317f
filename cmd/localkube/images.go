package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/etcd-steward/steward/internal/kubeimages"
)

type imagesOptions struct {
	versions                                    []string
	kubeCache, corednsCache, store, out, source string
	output                                      string
}

func newImagesCommand() *cobra.Command {
	var o imagesOptions
	cmd := &cobra.Command{
		Use:   "images",
		Short: "Build the image tarballs of a local Kubernetes (pause, the Kubernetes components and CoreDNS per version, Steward's own) and their index, images.json",
		Long: `Build, without a registry, the image tarballs a local Kubernetes imports into
its nodes' containerd: registry.k8s.io/pause (the tag each version's kubeadm
expects), registry.k8s.io/kube-apiserver, kube-controller-manager,
kube-scheduler and kube-proxy of each --kube-version (from the binaries
make kube-binaries built), registry.k8s.io/coredns/coredns of the version
each one's kubeadm names (from the binaries make coredns built), and steward.etcd.io/steward:<git describe> (steward
and the etcd versions of the binary store). The same inputs give the same
digests. The index, images.json, names each image's tag, digest and file.`,
		Example: `  localkube images --kube-version v1.35.4 --kube-version v1.36.3
  localkube images --out /tmp/images -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringSliceVar(&o.versions, "kube-version", []string{"v1.36.3"}, "Kubernetes versions to build the component images of (repeat or comma-separate)")
	f.StringVar(&o.source, "source", "", "Steward's source tree, from which steward and pause are built (default: the module the current directory is in)")
	f.StringVar(&o.kubeCache, "kube-cache", "", "per-version Kubernetes binaries, <dir>/<version>/bin (default SOURCE/.cache/kube)")
	f.StringVar(&o.corednsCache, "coredns-cache", "", "per-version CoreDNS binaries, <dir>/<version>/bin/coredns (default SOURCE/.cache/coredns)")
	f.StringVar(&o.store, "store", "", "etcd binary store whose versions go into Steward's image (default SOURCE/.cache/store)")
	f.StringVar(&o.out, "out", "", "directory of the image tarballs and images.json (default SOURCE/.cache/images)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	return cmd
}

func (o *imagesOptions) run(cmd *cobra.Command) error {
	switch o.output {
	case "table", "json", "yaml":
	default:
		return fmt.Errorf("unknown output format %q: use -o table, json or yaml", o.output)
	}
	if o.source == "" {
		gomod, err := exec.CommandContext(cmd.Context(), "go", "env", "GOMOD").Output()
		dir := filepath.Dir(strings.TrimSpace(string(gomod)))
		if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
			return errors.New("not inside Steward's source tree: run localkube images there, or pass --source DIR")
		}
		if _, err := os.Stat(filepath.Join(dir, "cmd", "localkube", "pause")); err != nil {
			return fmt.Errorf("%s is not Steward's source tree (no cmd/localkube/pause): pass --source DIR", dir)
		}
		o.source = dir
	}
	def := func(p *string, rel string) {
		if *p == "" {
			*p = filepath.Join(o.source, ".cache", rel)
		}
	}
	def(&o.kubeCache, "kube")
	def(&o.corednsCache, "coredns")
	def(&o.store, "store")
	def(&o.out, "images")
	ix, err := kubeimages.Build(cmd.Context(), kubeimages.Options{
		KubeVersions: o.versions, KubeCache: o.kubeCache, CoreDNSCache: o.corednsCache, Store: o.store,
		Source: o.source, Out: o.out, Log: cmd.ErrOrStderr(),
	})
	switch {
	case errors.Is(err, kubeimages.ErrNoBinaries):
		return fmt.Errorf("%w\nbuild them with: make kube-binaries KUBE_VERSIONS=%q (or pass --kube-cache where they are)", err, strings.Join(o.versions, " "))
	case errors.Is(err, kubeimages.ErrNoCoreDNS):
		return fmt.Errorf("%w\nbuild it with: make coredns KUBE_VERSIONS=%q (or pass --coredns-cache where it is)", err, strings.Join(o.versions, " "))
	case errors.Is(err, kubeimages.ErrNoStore):
		return fmt.Errorf("%w\nfill it with: make etcd-binaries (or pass --store)", err)
	case err != nil:
		return err
	}
	return printIndex(cmd.OutOrStdout(), o.output, ix, filepath.Join(o.out, kubeimages.IndexFile))
}

func printIndex(w io.Writer, format string, ix kubeimages.Index, indexPath string) error {
	switch format {
	case "json":
		b, err := json.MarshalIndent(ix, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(ix)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tDIGEST\tFILE\tSIZE")
	for _, i := range ix.Images {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d MB\n", i.Ref(), i.Digest, i.File, i.Size>>20)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "index: %s\n", indexPath)
	return err
}
