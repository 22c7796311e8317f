// Package inspect is the `steward inspect` command: read what the cluster
// stores, without changing it.
package inspect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/backup"
	"github.com/etcd-steward/steward/pkg/kstorage"
	"github.com/etcd-steward/steward/pkg/spec"
	"github.com/etcd-steward/steward/pkg/status"
)

// NewCommand returns the inspect command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "inspect", Short: "Read what the cluster stores, without changing it"}
	cmd.AddCommand(storageVersionsCommand(g))
	return cmd
}

type svOptions struct {
	snapshot, backupID, keyFile string
	k8sVersion, prefix          string
}

func storageVersionsCommand(g *cli.Globals) *cobra.Command {
	var o svOptions
	cmd := &cobra.Command{
		Use:   "storage-versions",
		Short: "Count Kubernetes objects per resource and stored API version, encrypted or not",
		Long: `Read the Kubernetes keyspace (--prefix, default /registry) straight from etcd,
with no API server: from the live cluster (one consistent revision), from a
snapshot file (--snapshot), or from a backup (--backup ID: the full backup and
the deltas after it). Each value's envelope is decoded (protobuf, JSON, CBOR,
or encrypted at rest with its provider and key name) and the objects and bytes
are counted per resource and stored API version.

With --kubernetes-version X.Y, objects stored in API versions that Kubernetes
X.Y no longer serves are listed with their replacement (a catalogue shipped
with Steward; DIR/removed-apis.yaml overrides it): the check to run before a
Kubernetes upgrade. Finding some is reported as a warning, not an error: the
command exits 0 whenever it could read the source.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := run(cmd, g, o); err != nil {
				return cli.BackupHint(cli.KeyHint(fmt.Errorf("inspect storage-versions: %w", err)))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.snapshot, "snapshot", "", "read this etcd snapshot file (etcdctl snapshot save, or a stopped member's member/snap/db) instead of the live cluster")
	f.StringVar(&o.backupID, "backup", "", "read this full `ID` (from steward backup list, or latest) and the deltas after it instead of the live cluster")
	f.StringVar(&o.keyFile, "key-file", "", "backup decryption key (default: the spec's backup.encryptionKeyFile)")
	f.StringVar(&o.k8sVersion, "kubernetes-version", "", "flag objects stored in API versions this Kubernetes version (X.Y) no longer serves")
	f.StringVar(&o.prefix, "prefix", kstorage.DefaultPrefix, "the API server's --etcd-prefix")
	return cmd
}

func run(cmd *cobra.Command, g *cli.Globals, o svOptions) error {
	if err := g.CheckOutput(); err != nil {
		return err
	}
	if o.snapshot != "" && o.backupID != "" {
		return errors.New("--snapshot and --backup name two sources: give one (neither reads the live cluster)")
	}
	if o.keyFile != "" && o.backupID == "" {
		return errors.New("--key-file decrypts a backup: use it with --backup")
	}
	var removed *kstorage.RemovedCatalogue
	if o.k8sVersion != "" {
		if _, _, err := kstorage.ParseMinor(o.k8sVersion); err != nil {
			return fmt.Errorf("--kubernetes-version: %w", err)
		}
		dir, err := g.StewardDir()
		if err != nil {
			return err
		}
		if removed, err = kstorage.LoadRemoved(filepath.Join(dir, kstorage.RemovedFileName)); err != nil {
			return err
		}
	}
	// The first Ctrl-C stops the scan and removes the fetched backup; a
	// second one kills the process as usual.
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }()
	inv := kstorage.NewInventory(o.prefix)
	var src kstorage.Source
	var notes []string
	var err error
	switch {
	case o.snapshot != "":
		src, err = fromSnapshot(ctx, o.snapshot, inv)
	case o.backupID != "":
		src, notes, err = fromBackup(ctx, cmd, g, o, inv)
	default:
		src, err = fromCluster(ctx, cmd, g, inv)
	}
	if err != nil {
		return err
	}
	rep := inv.Report(src)
	rep.Notes = notes
	if removed != nil {
		if err := rep.CheckRemoved(removed, o.k8sVersion); err != nil {
			return err
		}
	}
	stderr := cmd.ErrOrStderr()
	for _, n := range rep.Notes {
		fmt.Fprintf(stderr, "note: %s\n", n)
	}
	if rc := rep.RemovedAPIs; rc != nil && rc.Objects > 0 {
		fmt.Fprintf(stderr, "warning: %s stored in API versions Kubernetes %s no longer serves: rewrite them through the API (storage migration) before upgrading to %s\n",
			objects(rc.Objects), rc.KubernetesVersion, rc.KubernetesVersion)
	}
	return g.Print(cmd.OutOrStdout(), rep, func(tw *tabwriter.Writer) { table(tw, rep) })
}

func fromSnapshot(ctx context.Context, path string, inv *kstorage.Inventory) (kstorage.Source, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return kstorage.Source{}, err
	}
	info, err := kstorage.ScanSnapshot(ctx, abs, inv)
	if err != nil {
		return kstorage.Source{}, err
	}
	return kstorage.Source{Type: "snapshot", Path: abs, Revision: info.Revision, CompactRevision: info.CompactRevision}, nil
}

func fromBackup(ctx context.Context, cmd *cobra.Command, g *cli.Globals, o svOptions, inv *kstorage.Inventory) (kstorage.Source, []string, error) {
	c, err := g.Cluster(cmd)
	if err != nil {
		return kstorage.Source{}, nil, err
	}
	store, err := c.BackupStore(cmd.Context())
	if err != nil {
		return kstorage.Source{}, nil, err
	}
	var key *backup.Key
	if kf := o.keyFile; kf != "" || c.Spec.Backup.EncryptionKeyFile != "" {
		if kf == "" {
			kf = spec.Path(c.Dir, c.Spec.Backup.EncryptionKeyFile)
		}
		if key, err = backup.LoadKey(kf); err != nil {
			return kstorage.Source{}, nil, err
		}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "fetching and verifying backup %s\n", o.backupID)
	auth, err := c.BackupAuthKey()
	if err != nil {
		return kstorage.Source{}, nil, err
	}
	b, err := kstorage.FetchBackup(ctx, store, key, backup.ListOptions{Key: auth}, o.backupID, c.Dir)
	if err != nil {
		return kstorage.Source{}, nil, err
	}
	defer b.Remove()
	info, err := kstorage.ScanSnapshot(ctx, b.Path, inv)
	if err != nil {
		return kstorage.Source{}, nil, fmt.Errorf("backup %s: %w", b.Full.ID, err)
	}
	src := kstorage.Source{Type: "backup", Cluster: c.Spec.Name, BackupID: b.Full.ID, Revision: b.Revision,
		CompactRevision: info.CompactRevision, FullRevision: b.Full.EndRevision, DeltasApplied: b.Deltas}
	return src, b.Notes, nil
}

func fromCluster(ctx context.Context, cmd *cobra.Command, g *cli.Globals, inv *kstorage.Inventory) (kstorage.Source, error) {
	c, err := g.Cluster(cmd)
	if err != nil {
		return kstorage.Source{}, err
	}
	st, err := status.Get(ctx, c)
	if err != nil {
		return kstorage.Source{}, err
	}
	if !st.Cluster.Quorate {
		ready, _ := st.Condition(status.CondReady)
		return kstorage.Source{}, fmt.Errorf("cannot read the live cluster: %s; read a snapshot (--snapshot FILE) or a backup (--backup ID) instead", ready.Message)
	}
	cli, err := c.Client()
	if err != nil {
		return kstorage.Source{}, err
	}
	defer cli.Close()
	info, err := kstorage.ScanLive(ctx, cli, inv, kstorage.DefaultPageSize)
	if err != nil {
		return kstorage.Source{}, err
	}
	return kstorage.Source{Type: "cluster", Cluster: c.Spec.Name, Revision: info.Revision}, nil
}

func table(w io.Writer, rep kstorage.Report) {
	s := rep.Source
	switch s.Type {
	case "snapshot":
		fmt.Fprintf(w, "Snapshot %s at revision %d", s.Path, s.Revision)
	case "backup":
		fmt.Fprintf(w, "Backup %s of cluster %s at revision %d", s.BackupID, s.Cluster, s.Revision)
		if s.DeltasApplied > 0 {
			fmt.Fprintf(w, " (full snapshot at %d, %d delta segments replayed)", s.FullRevision, s.DeltasApplied)
		}
	default:
		fmt.Fprintf(w, "Cluster %s at revision %d", s.Cluster, s.Revision)
	}
	fmt.Fprintf(w, ", keys under %s/\n\n", rep.Prefix)
	fmt.Fprintln(w, "RESOURCE\tAPI VERSION\tKIND\tFORMAT\tOBJECTS\tSIZE\tENCRYPTED")
	for _, r := range rep.Resources {
		for _, v := range r.Versions {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Resource, dash(v.APIVersion), dash(v.Kind), v.Format, v.Objects, cli.Bytes(v.Bytes), "no")
		}
		for _, e := range r.Encryption {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Resource, "?", "?", kstorage.FormatEncrypted, e.Objects, cli.Bytes(e.Bytes),
				strings.Join([]string{e.Provider, e.PrefixVersion, dash(e.KeyName)}, ":"))
		}
	}
	if o := rep.OtherKeys; o.Objects > 0 {
		fmt.Fprintf(w, "(other keys)\t-\t-\t-\t%d\t%s\t-\n", o.Objects, cli.Bytes(o.Bytes))
	}
	t := rep.Totals
	fmt.Fprintf(w, "TOTAL (%d resources)\t\t\t\t%d\t%s\t%d encrypted\n", t.Resources, t.Objects, cli.Bytes(t.Bytes), t.EncryptedObjects)
	if rc := rep.RemovedAPIs; rc != nil {
		fmt.Fprintln(w)
		if len(rc.Uses) == 0 {
			fmt.Fprintf(w, "No object is stored in an API version Kubernetes %s no longer serves.\n", rc.KubernetesVersion)
		} else {
			fmt.Fprintf(w, "WARNING: %s stored in API versions Kubernetes %s no longer serves;\n", objects(rc.Objects), rc.KubernetesVersion)
			fmt.Fprintln(w, "rewrite them through the API (storage migration) before upgrading:")
			fmt.Fprintln(w)
			fmt.Fprintln(w, "RESOURCE\tAPI VERSION\tKIND\tOBJECTS\tREMOVED IN\tREPLACEMENT")
			for _, u := range rc.Uses {
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", u.Resource, u.APIVersion, u.Kind, u.Objects, u.RemovedIn, u.Replacement)
			}
		}
		if rc.UncheckedObjects > 0 {
			fmt.Fprintf(w, "Not checked: %d encrypted or undecodable objects (their API version cannot be read without the API server).\n", rc.UncheckedObjects)
		}
	}
}

// objects says "1 object is" or "N objects are".
func objects(n int64) string {
	if n == 1 {
		return "1 object is"
	}
	return fmt.Sprintf("%d objects are", n)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
