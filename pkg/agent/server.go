package agent

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
	"github.com/etcd-steward/steward/pkg/binaries"
	"github.com/etcd-steward/steward/pkg/pki"
	"github.com/etcd-steward/steward/pkg/recoverycount"
	"github.com/etcd-steward/steward/pkg/spec"
)

// Handler returns the agent's HTTP API. It is transport-agnostic: Run serves
// it on a Unix socket; a TLS listener can serve the same handler.
func (a *Agent) Handler() http.Handler {
	// Every error a handler returns gets the command layer's advice.
	reply := func(w http.ResponseWriter, v any, err error) { writeReply(w, v, a.advise(err)) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent", func(w http.ResponseWriter, r *http.Request) {
		reply(w, a.Info(), nil)
	})
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		reply(w, a.Members(), nil)
	})
	mux.HandleFunc("GET /v1/members/{name}", named(func(w http.ResponseWriter, r *http.Request, name string) {
		m, ok := a.member(name)
		if !ok {
			reply(w, nil, errNotFound(name))
			return
		}
		reply(w, m.status(), nil)
	}))
	mux.HandleFunc("PUT /v1/members/{name}", named(func(w http.ResponseWriter, r *http.Request, name string) {
		var cfg agentapi.MemberConfig
		if err := decodeBody(w, r, 1<<20, &cfg); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode member config: %w", err)})
			return
		}
		if cfg.Name != name {
			reply(w, nil, badRequest{fmt.Errorf("member config names %q but the URL names %q", cfg.Name, name)})
			return
		}
		st, err := a.PutMember(cfg)
		if err != nil {
			err = badRequest{err}
		}
		reply(w, st, err)
	}))
	mux.HandleFunc("DELETE /v1/members/{name}", named(func(w http.ResponseWriter, r *http.Request, name string) {
		ctx, cancel := stopContext(r)
		defer cancel()
		reason := r.URL.Query().Get("aside")
		if reason != "" && spec.ValidName(reason) != nil {
			reply(w, nil, badRequest{fmt.Errorf("aside reason %q: use lower-case letters, digits and '-'", reason)})
			return
		}
		aside, err := a.DeleteMemberAside(ctx, name, reason)
		reply(w, agentapi.Aside{Aside: aside}, err)
	}))
	mux.HandleFunc("GET /v1/members/{name}/datadir", named(func(w http.ResponseWriter, r *http.Request, name string) {
		f, err := a.CheckDataDir(name)
		reply(w, f, err)
	}))
	mux.HandleFunc("POST /v1/members/{name}/datadir/aside", named(func(w http.ResponseWriter, r *http.Request, name string) {
		var req agentapi.AsideRequest
		if err := decodeBody(w, r, 1<<16, &req); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode aside request: %w", err)})
			return
		}
		if spec.ValidName(req.Reason) != nil {
			reply(w, nil, badRequest{fmt.Errorf("aside reason %q: use lower-case letters, digits and '-'", req.Reason)})
			return
		}
		aside, err := a.MoveDataDirAside(name, req.Reason)
		reply(w, agentapi.Aside{Aside: aside}, err)
	}))
	mux.HandleFunc("POST /v1/members/{name}/{action}", named(func(w http.ResponseWriter, r *http.Request, name string) {
		m, ok := a.member(name)
		if !ok {
			reply(w, nil, errNotFound(name))
			return
		}
		ctx, cancel := stopContext(r)
		defer cancel()
		var err error
		switch r.PathValue("action") {
		case "start":
			err = m.start()
		case "stop":
			err = m.stop(ctx, true)
		case "kill":
			err = m.halt(ctx, true, 0)
		case "restart":
			if err = m.stop(ctx, false); err == nil {
				err = m.start()
			}
		case "version":
			var req agentapi.VersionRequest
			if err := decodeBody(w, r, 1<<16, &req); err != nil {
				reply(w, nil, badRequest{fmt.Errorf("decode version request: %w", err)})
				return
			}
			st, err := a.SwapVersion(ctx, name, req)
			if err != nil {
				err = badRequest{err}
			}
			reply(w, st, err)
			return
		default:
			http.NotFound(w, r)
			return
		}
		reply(w, m.status(), err)
	}))
	mux.HandleFunc("PUT /v1/members/{name}/datadir/stage", named(func(w http.ResponseWriter, r *http.Request, name string) {
		var req agentapi.StageRequest
		dec := json.NewDecoder(strings.NewReader(r.Header.Get("X-Steward-Stage")))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode the X-Steward-Stage header: %w", err)})
			return
		}
		staged, err := a.StageDataDir(r.Context(), name, req, http.MaxBytesReader(w, r.Body, 64<<30))
		reply(w, agentapi.Staged{Staged: staged}, err)
	}))
	mux.HandleFunc("POST /v1/members/{name}/datadir/commit", named(func(w http.ResponseWriter, r *http.Request, name string) {
		var req agentapi.Staged
		if err := decodeBody(w, r, 1<<16, &req); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode commit request: %w", err)})
			return
		}
		aside, err := a.CommitDataDir(name, req.Staged)
		reply(w, agentapi.Aside{Aside: aside}, err)
	}))
	mux.HandleFunc("POST /v1/members/{name}/datadir/discard", named(func(w http.ResponseWriter, r *http.Request, name string) {
		var req agentapi.Staged
		if err := decodeBody(w, r, 1<<16, &req); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode discard request: %w", err)})
			return
		}
		reply(w, nil, a.DiscardStaged(name, req.Staged))
	}))
	mux.HandleFunc("GET /v1/members/{name}/datadir/applied", named(func(w http.ResponseWriter, r *http.Request, name string) {
		ai, err := a.Applied(name)
		reply(w, ai, err)
	}))
	mux.HandleFunc("GET /v1/members/{name}/datadir/db", named(func(w http.ResponseWriter, r *http.Request, name string) {
		f, sum, n, err := a.OpenDatabase(name)
		if err != nil {
			reply(w, nil, err)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Header().Set("X-Steward-SHA256", sum)
		if _, err := io.CopyN(w, f, n); err != nil {
			a.log.Warn("sending a member's database", "member", name, "err", err)
		}
	}))
	mux.HandleFunc("GET /v1/kept", func(w http.ResponseWriter, r *http.Request) {
		ks, err := a.Kept()
		reply(w, ks, err)
	})
	mux.HandleFunc("POST /v1/kept/remove", func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.KeptPath
		if err := decodeBody(w, r, 1<<16, &req); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode remove request: %w", err)})
			return
		}
		reply(w, nil, a.RemoveKept(req.Path))
	})
	mux.HandleFunc("GET /v1/members/{name}/freeport", named(func(w http.ResponseWriter, r *http.Request, name string) {
		p, err := a.FreePort(name)
		reply(w, agentapi.Port{Port: p}, err)
	}))
	mux.HandleFunc("GET /v1/binaries", func(w http.ResponseWriter, r *http.Request) {
		l, err := a.ListBinaries()
		reply(w, l, err)
	})
	mux.HandleFunc("GET /v1/binaries/{version}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, a.CheckBinary(r.Context(), r.PathValue("version")), nil)
	})
	mux.HandleFunc("PUT /v1/binaries/{version}", func(w http.ResponseWriter, r *http.Request) {
		// The version becomes a directory name: check it before the body
		// is read or anything is written.
		v, err := binaries.NormalizeVersion(r.PathValue("version"))
		if err != nil {
			reply(w, nil, badRequest{err})
			return
		}
		body := http.MaxBytesReader(w, r.Body, binaries.MaxBundleSize)
		res, err := a.ReceiveBinary(r.Context(), v, body, r.URL.Query().Get("replace") == "true")
		if err != nil {
			// Read what the client still sends, so that it reads this
			// answer rather than a connection reset (bounded by the limit).
			_, _ = io.Copy(io.Discard, body)
		}
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/members/{name}/check-v2store", named(func(w http.ResponseWriter, r *http.Request, name string) {
		var req agentapi.V2StoreRequest
		if err := decodeBody(w, r, 1<<16, &req); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode v2 store check request: %w", err)})
			return
		}
		res, err := a.CheckV2Store(r.Context(), name, req.Version)
		reply(w, res, err)
	}))
	mux.HandleFunc("PUT /v1/cluster", func(w http.ResponseWriter, r *http.Request) {
		var f agentapi.ClusterFiles
		if err := decodeBody(w, r, 1<<20, &f); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode cluster files: %w", err)})
			return
		}
		reply(w, nil, a.SetCluster(f))
	})
	mux.HandleFunc("PUT /v1/recovery-counts", func(w http.ResponseWriter, r *http.Request) {
		var rc recoverycount.Counts
		if err := decodeBody(w, r, 64<<10, &rc); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode recovery counts: %w", err)})
			return
		}
		reply(w, nil, a.PutRecoveryCounts(rc))
	})
	mux.HandleFunc("GET /v1/certs/{name}", func(w http.ResponseWriter, r *http.Request) {
		f, err := a.HostCert(r.PathValue("name"))
		reply(w, f, err)
	})
	mux.HandleFunc("PUT /v1/certs/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, pki.MaxCertPEM))
		if err != nil {
			reply(w, nil, badRequest{fmt.Errorf("read the certificate: %w", err)})
			return
		}
		res, err := a.InstallHostCert(r.PathValue("name"), b)
		reply(w, res, err)
	})
	mux.HandleFunc("DELETE /v1/certs/{name}/prev", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, a.ForgetPreviousHostCert(r.PathValue("name")))
	})
	mux.HandleFunc("PUT /v1/ca", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, pki.MaxTrustBundle))
		if err != nil {
			reply(w, nil, badRequest{fmt.Errorf("read the trust bundle: %w", err)})
			return
		}
		var caller *x509.Certificate
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			caller = r.TLS.PeerCertificates[0]
		}
		res, err := a.InstallTrustBundle(b, caller)
		reply(w, res, err)
	})
	mux.HandleFunc("GET /v1/backup/status", func(w http.ResponseWriter, r *http.Request) {
		reply(w, a.BackupStatuses(), nil)
	})
	mux.HandleFunc("GET /v1/kube/manifests/{name}", func(w http.ResponseWriter, r *http.Request) {
		m, err := a.KubeManifest(r.PathValue("name"))
		reply(w, m, err)
	})
	mux.HandleFunc("PUT /v1/kube/manifests/{name}", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, agentapi.MaxKubeManifest))
		if err != nil {
			reply(w, nil, badRequest{fmt.Errorf("read the manifest: %w", err)})
			return
		}
		res, err := a.PutKubeManifest(r.PathValue("name"), r.URL.Query().Get("plan"), b)
		reply(w, res, err)
	})
	mux.HandleFunc("GET /v1/kube/kept/{plan}/{name}", func(w http.ResponseWriter, r *http.Request) {
		m, err := a.KubeManifestKept(r.PathValue("plan"), r.PathValue("name"))
		reply(w, m, err)
	})
	mux.HandleFunc("DELETE /v1/kube/kept/{plan}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, nil, a.DeleteKubeManifestsKept(r.PathValue("plan")))
	})
	mux.HandleFunc("POST /v1/shutdown", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"status": "shutting down"}, nil)
		a.Shutdown()
	})
	return mux
}

// named checks the {name} of a member URL before the handler sees it: a
// member name becomes file names (its config, log and pid file), so a name
// such as "../../x" (sent as ..%2F..%2Fx) must never reach a path.
func named(h func(w http.ResponseWriter, r *http.Request, name string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if err := spec.ValidName(name); err != nil {
			writeReply(w, nil, badRequest{fmt.Errorf("member %w", err)})
			return
		}
		h(w, r, name)
	}
}

// decodeBody decodes a request body of at most limit bytes holding exactly
// one JSON object whose fields are all known to v: a misspelt or newer
// field is an error, not silently ignored, and so is anything after the
// object.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON object")
	}
	return nil
}

func stopContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), stopGrace+30*time.Second)
}

type badRequest struct{ error }

func (b badRequest) Unwrap() error { return b.error }

// notFound answers 404 with its error (what was asked for is not there).
type notFound struct{ error }

func (n notFound) Unwrap() error { return n.error }

func writeReply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		var nf notFoundError
		var br badRequest
		var nf2 notFound
		switch {
		case errors.As(err, &nf), errors.As(err, &nf2):
			code = http.StatusNotFound
		case errors.As(err, &br):
			code = http.StatusBadRequest
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(agentapi.Error{Error: err.Error()})
		return
	}
	if v == nil {
		v = map[string]string{"status": "ok"}
	}
	_ = json.NewEncoder(w).Encode(v)
}
