package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/etcd-steward/steward/pkg/agentapi"
)

// Handler returns the agent's HTTP API. It is transport-agnostic: Run serves
// it on a Unix socket; a TLS listener can serve the same handler.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent", func(w http.ResponseWriter, r *http.Request) {
		reply(w, a.Info(), nil)
	})
	mux.HandleFunc("GET /v1/members", func(w http.ResponseWriter, r *http.Request) {
		reply(w, a.Members(), nil)
	})
	mux.HandleFunc("GET /v1/members/{name}", func(w http.ResponseWriter, r *http.Request) {
		m, ok := a.member(r.PathValue("name"))
		if !ok {
			reply(w, nil, errNotFound(r.PathValue("name")))
			return
		}
		reply(w, m.status(), nil)
	})
	mux.HandleFunc("PUT /v1/members/{name}", func(w http.ResponseWriter, r *http.Request) {
		var cfg agentapi.MemberConfig
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&cfg); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode member config: %w", err)})
			return
		}
		if cfg.Name != r.PathValue("name") {
			reply(w, nil, badRequest{fmt.Errorf("member config names %q but the URL names %q", cfg.Name, r.PathValue("name"))})
			return
		}
		st, err := a.PutMember(cfg)
		if err != nil {
			err = badRequest{err}
		}
		reply(w, st, err)
	})
	mux.HandleFunc("DELETE /v1/members/{name}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := stopContext(r)
		defer cancel()
		reply(w, nil, a.DeleteMember(ctx, r.PathValue("name")))
	})
	mux.HandleFunc("POST /v1/members/{name}/{action}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
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
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
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
	})
	mux.HandleFunc("GET /v1/binaries/{version}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, a.CheckBinary(r.Context(), r.PathValue("version")), nil)
	})
	mux.HandleFunc("POST /v1/members/{name}/check-v2store", func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.V2StoreRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			reply(w, nil, badRequest{fmt.Errorf("decode v2 store check request: %w", err)})
			return
		}
		res, err := a.CheckV2Store(r.Context(), r.PathValue("name"), req.Version)
		reply(w, res, err)
	})
	mux.HandleFunc("POST /v1/shutdown", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]string{"status": "shutting down"}, nil)
		a.Shutdown()
	})
	return mux
}

func stopContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), stopGrace+30*time.Second)
}

type badRequest struct{ error }

func (b badRequest) Unwrap() error { return b.error }

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		code := http.StatusInternalServerError
		var nf notFoundError
		var br badRequest
		switch {
		case errors.As(err, &nf):
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
