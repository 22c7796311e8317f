// Package certs is the `steward certs` command: the inventory of the
// cluster's certificates, renewing leaves by hand, issuing client
// certificates for the users of etcd, rotating the CA, and taking over
// issuing the certificates of an adopted cluster with the operator's CA.
package certs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/etcd-steward/steward/cmd/steward/internal/cli"
	"github.com/etcd-steward/steward/pkg/adopt"
	"github.com/etcd-steward/steward/pkg/carotate"
	"github.com/etcd-steward/steward/pkg/certs"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/recovery"
	"github.com/etcd-steward/steward/pkg/status"
)

// NewCommand returns the certs command.
func NewCommand(g *cli.Globals) *cobra.Command {
	cmd := &cobra.Command{Use: "certs", Short: "List, renew and issue the cluster's certificates"}
	cmd.AddCommand(listCommand(g), renewCommand(g), issueClientCommand(g), rotateCACommand(g), takeOverCommand(g))
	return cmd
}

func listCommand(g *cli.Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List every certificate: the files and what each member and agent serves now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			inv, err := status.Certificates(cmd.Context(), c)
			if err != nil {
				return err
			}
			if inv == nil {
				inv = []pki.CertInfo{}
			}
			return g.Print(cmd.OutOrStdout(), inv, func(tw *tabwriter.Writer) { table(tw, inv) })
		},
	}
}

func table(tw *tabwriter.Writer, inv []pki.CertInfo) {
	fmt.Fprintln(tw, "NAME\tSUBJECT\tSANS\tSERIAL\tNOT BEFORE\tNOT AFTER\tREMAINING\tSOURCE")
	for _, i := range inv {
		src := i.File
		if i.Endpoint != "" {
			src = "tls://" + i.Endpoint
		}
		if i.Serial == "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%s (%s)\n", i.Name, src, i.Error)
			continue
		}
		if i.Error != "" {
			src += " (" + i.Error + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", i.Name, i.Subject, orDash(strings.Join(i.SANs, ",")), i.Serial,
			i.NotBefore.Format(time.RFC3339), i.NotAfter.Format(time.RFC3339), i.Remaining().String(), src)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func renewCommand(g *cli.Globals) *cobra.Command {
	var all, watch bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "renew [--all | NAME... | --watch]",
		Short: "Renew leaf certificates now (server, peer, client, clients/NAME); members pick them up without a restart",
		Long: `Renew the named leaf certificates now, or with --all every one of this machine's
(server, peer, client, agent; not the client certificates issued for users of etcd,
which are renewed by name: copy the renewed clients/NAME.crt to its user). A renewed
certificate keeps its key and names; members serve it from their next TLS handshake,
which the command waits for before it drops the previous certificate (kept as .prev).

On a multi-host cluster the joined hosts' certificates of those names (server, peer,
agent, client; all with --all) are renewed too, host after host: each is reissued
here with the key the host keeps and handed to the host's agent over its mutual-TLS
API, which checks and installs it; the command waits until the host serves it. A
host that cannot be renewed is reported (exit 1) and the others are still renewed.

With --watch it renews automatically instead, until stopped (SIGTERM): the renewal
loop an agent runs (this machine's leaves and, where the directory holds the CA key,
the joined hosts' ones, each at its renewal point), logging to stderr. ` + "`steward up`" + `
starts it in the background on the coordinator of a multi-host cluster that runs no
local agent (DIR/run/certrenew.pid, DIR/logs/certrenew.log), and starts it again when
it is gone; ` + "`steward down`" + ` stops it. To have it restarted whenever it dies, run it under
systemd instead (deploy/systemd/steward-certrenew.service; ` + "`up`" + ` then finds it running).
Only one runs per directory: a second is refused. It records a heartbeat in
DIR/status/certrenew.json, which ` + "`steward status`" + ` reports (CertificateRenewal).`,
		RunE: func(cmd *cobra.Command, names []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			if watch {
				if all || len(names) > 0 {
					return errors.New("--watch renews every leaf at its renewal point: give it without --all or names")
				}
				dir, err := g.StewardDir()
				if err != nil {
					return err
				}
				// The spec must open now: bad input is one error at once,
				// not a loop logging it.
				c, err := g.Cluster(cmd)
				if err != nil {
					return err
				}
				if err := cli.OwnCerts(c, cmd.CommandPath()); err != nil {
					return err
				}
				// One renewal process per directory, whoever started it
				// (`steward up`, systemd): it records its pid for them.
				release, err := certs.HoldRenewer(c)
				if err != nil {
					return cli.Hint(err, certs.ErrRenewerRunning, "it renews this directory's certificates already; to replace it, stop it first (`systemctl stop steward-certrenew` under systemd, else `kill` that pid)")
				}
				defer release()
				ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
				defer stop()
				log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
				log.Info("certificate renewal started", "dir", dir, "pid", os.Getpid())
				// The coordinator's automatic recovery of a multi-host
				// cluster (recovery.mode auto) runs beside the renewal:
				// this is the process that runs on the coordinator
				// between commands (docs/hosts.md).
				var wg sync.WaitGroup
				wg.Go(func() { recovery.RunAuto(ctx, dir, "", log.With("component", "recovery")) })
				certs.RunRenewal(ctx, dir, log.With("component", "certificates"), cli.LibraryAdvice)
				wg.Wait()
				log.Info("certificate renewal stopped")
				return nil
			}
			if all == (len(names) > 0) {
				return errors.New("name the certificates to renew (see `steward certs list`), or give --all")
			}
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if err := cli.OwnCerts(c, cmd.CommandPath()); err != nil {
				return err
			}
			if all {
				if names, err = certs.HostLeaves(c); err != nil {
					return err
				}
			}
			// The renewal loop of this directory (an agent's, or the
			// coordinator's `certs renew --watch`) may hold the renewal
			// lock for a moment: wait for it rather than fail.
			deadline := time.Now().Add(timeout)
			rs, err := retryWhileRunning(cmd.Context(), deadline, func() ([]pki.Renewal, error) {
				return certs.Renew(cmd.Context(), c, names, true, timeout)
			})
			err = cli.Hint(err, pki.ErrUnknownCert, "name one listed by `steward certs list`")
			if err != nil {
				return err
			}
			// Then the joined hosts' leaves of those names (server, peer,
			// agent, client), one host after the other: a host that fails
			// is reported and the others are still renewed.
			hostNames := names
			if all {
				hostNames = nil
			}
			hrs, herr := retryWhileRunning(cmd.Context(), deadline, func() ([]pki.Renewal, error) {
				return certs.RenewHosts(cmd.Context(), c, hostNames, true, timeout)
			})
			rs = append(rs, hrs...)
			if rs == nil {
				rs = []pki.Renewal{}
			}
			if err := g.Print(cmd.OutOrStdout(), rs, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "HOST\tNAME\tOLD SERIAL\tNEW SERIAL\tNOT AFTER\tFILE")
				for _, r := range rs {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", orDash(r.Host), r.Name, r.OldSerial, r.NewSerial, r.NotAfter.Format(time.RFC3339), r.File)
				}
			}); err != nil {
				return err
			}
			return herr
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "renew every leaf certificate")
	cmd.Flags().BoolVar(&watch, "watch", false, "renew automatically at the renewal point until stopped (what steward up runs on a multi-host coordinator without a local agent)")
	cmd.Flags().DurationVar(&timeout, "timeout", time.Minute, "how long to wait for the members to serve the renewed certificates")
	return cmd
}

// retryWhileRunning calls renew again, every 200 ms until deadline, while
// it finds another renewal of the directory running
// (certs.ErrRenewalRunning: it then did nothing).
func retryWhileRunning(ctx context.Context, deadline time.Time, renew func() ([]pki.Renewal, error)) ([]pki.Renewal, error) {
	for {
		rs, err := renew()
		if !errors.Is(err, certs.ErrRenewalRunning) || time.Now().After(deadline) {
			return rs, err
		}
		select {
		case <-ctx.Done():
			return rs, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func issueClientCommand(g *cli.Globals) *cobra.Command {
	var validity time.Duration
	var out string
	cmd := &cobra.Command{
		Use:   "issue-client NAME",
		Short: "Issue a client certificate for a user of etcd (e.g. kube-apiserver); it is recorded, listed and warned about",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			if validity < 0 {
				return fmt.Errorf("--validity %s: give a positive duration such as 8760h", validity)
			}
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if err := cli.OwnCerts(c, cmd.CommandPath()); err != nil {
				return err
			}
			f, err := pki.IssueClient(c.CertDir(), c.Spec.Name, args[0], validity, out, c.Validity())
			err = cli.Hint(err, pki.ErrBadValidity, "give a shorter --validity")
			if err != nil {
				return err
			}
			return g.Print(cmd.OutOrStdout(), f, func(tw *tabwriter.Writer) {
				fmt.Fprintln(tw, "NAME\tCA\tCERT\tKEY")
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Name, f.CA, f.Cert, f.Key)
			})
		},
	}
	cmd.Flags().DurationVar(&validity, "validity", 0, "lifetime of the certificate (default the spec's tls.leafValidity)")
	cmd.Flags().StringVar(&out, "out", "", "also copy ca.crt, NAME.crt and NAME.key (0600) into this directory")
	return cmd
}

func rotateCACommand(g *cli.Globals) *cobra.Command {
	var rollback bool
	cmd := &cobra.Command{
		Use:   "rotate-ca",
		Short: "Replace the cluster CA in phases, as a resumable plan (`steward plan show|resume|abort`)",
		Long: `Replace the cluster CA without a moment where a member, the agent or a client that
re-reads its files cannot connect. The plan's steps: create the new CA (pki/ca-next.*)
and its certificate cross-signed by the old CA; make pki/ca.crt (the CA file of
` + "`steward env`" + `) the bundle old + new; reissue the server, peer and agent
certificates, then the admin and issued client certificates (pki/clients/), from the
new CA with their keys, each followed by the cross-signed CA; make the new CA the CA
(the old one kept as pki/ca-old.*) and ca.crt hold it alone; restart the members one
at a time (etcd reads its CA files only at start), leadership moved first, each
waiting for health. A client that loaded the old CA once keeps working until its
member restarts without it. Copies of client certificates made with --out are not
updated: copy pki/clients/NAME.crt and pki/ca.crt again.

Killed or failed halfway, ` + "`steward plan resume`" + ` finishes it and
` + "`steward plan abort`" + ` stops it. On a cluster with joined hosts, each host's ca.crt
and leaves are replaced through its agent (its keys stay on the host) and its members
restarted by it; a host that cannot be reached fails the step, naming it.

With --rollback (as ` + "`steward rollback`" + ` does when the latest plan is an unfinished
rotation): the rotation, aborted, failed or interrupted before its drop step, is
rolled back by a plan of its own: every leaf issued by the old CA again, ca.crt the old
CA alone, the new CA moved aside as pki/ca-next.*.aborted-SERIAL.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Refused before the agent is started for it.
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			if err := cli.OwnCerts(c, cmd.CommandPath()); err != nil {
				return err
			}
			c, err = g.ClusterWithAgent(cmd)
			if err != nil {
				return err
			}
			if rollback {
				_, err = carotate.Rollback(cmd.Context(), c)
				err = cli.CARollbackHint(err)
			} else {
				_, err = carotate.Apply(cmd.Context(), c)
			}
			return cli.PlanHint(err)
		},
	}
	cmd.Flags().BoolVar(&rollback, "rollback", false, "roll back the latest CA rotation (stopped before its drop step) to the old CA, as a plan of its own")
	return cmd
}

func takeOverCommand(g *cli.Globals) *cobra.Command {
	var o adopt.TakeOverOptions
	var yes bool
	cmd := &cobra.Command{
		Use:   "take-over --ca-cert FILE --ca-key FILE --yes",
		Short: "Issue the certificates of an adopted cluster from now on, with the operator's CA (a resumable plan)",
		Long: `Hand Steward the operator's CA so it issues and renews the certificates of a cluster
whose every member is adopted (` + "`steward adopt`" + `). Checked first, nothing changed on a
refusal: the key is the certificate's, the CA outlives a leaf's lifetime, it signed every
member's serving and peer certificate and the client certificate given at attach, and
the members trust it alone. Then the CA is copied into the certificate directory
(pki/ca.key 0600), Steward's server, peer and admin client certificates are issued
from it (the names of the members' certificates kept), and a plan restarts the members
one at a time with them (leadership moved first, each waiting for health), then drops
the operator's files from the spec. The operator's files are never written or removed.
Without --yes the checks run and nothing changes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := g.CheckOutput(); err != nil {
				return err
			}
			if o.CACert == "" || o.CAKey == "" {
				return errors.New("give the operator's CA certificate and key: --ca-cert FILE --ca-key FILE")
			}
			c, err := g.Cluster(cmd)
			if err != nil {
				return err
			}
			// Checked before the agent is started for it (TakeOver checks
			// again).
			ca, l, err := adopt.TakeOverCheck(cmd.Context(), c, o, time.Now())
			if err != nil {
				return takeOverHint(err)
			}
			if !yes {
				fmt.Fprintf(cmd.ErrOrStderr(), "the CA %s (expires %s) can take over the certificates of cluster %s: Steward would copy it into %s, issue a server certificate for %s and a peer certificate %q for %s from it, and restart each member with them\n",
					ca.Cert.Subject.CommonName, ca.Cert.NotAfter.UTC().Format(time.RFC3339), c.Spec.Name, c.CertDir(),
					strings.Join(l.Server.Hosts, ","), l.Peer.CN, strings.Join(l.Peer.Hosts, ","))
				return errors.New("nothing changed: add --yes to consent to the take-over")
			}
			if c, err = g.ClusterWithAgent(cmd); err != nil {
				return err
			}
			p, err := adopt.TakeOver(cmd.Context(), c, o)
			if err != nil {
				return cli.PlanHint(takeOverHint(err))
			}
			return g.PrintPlan(cmd.OutOrStdout(), p)
		},
	}
	cmd.Flags().StringVar(&o.CACert, "ca-cert", "", "the operator's CA certificate (PEM, one certificate)")
	cmd.Flags().StringVar(&o.CAKey, "ca-key", "", "the operator's CA key (PEM, ECDSA); copied into the certificate directory (0600)")
	cmd.Flags().BoolVar(&yes, "yes", false, "consent: Steward issues the cluster's certificates from now on")
	return cmd
}

// takeOverHint adds what to do about a refused certificate take-over: the
// flags that name the CA, and the commands that show the certificates,
// adopt the members or renew the CA.
func takeOverHint(err error) error {
	err = cli.Hint(err, adopt.ErrCA, "check --ca-cert and --ca-key")
	err = cli.Advise(err, adopt.ErrTakenOver, " (`steward certs list`)")
	err = cli.Advise(err, adopt.ErrNotAllAdopted, ": adopt every member first (`steward adopt`), then take over its certificates")
	return cli.Advise(err, adopt.ErrCAExpiresSoon, ": renew the CA first (`steward certs rotate-ca` after the take-over replaces it), or shorten tls.leafValidity")
}
