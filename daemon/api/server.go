package api

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	"github.com/flowforge/flowforge/daemon/metrics"
)

// Server is the HTTP API server: Start listens, Run serves until its
// context ends, then stops gracefully.
type Server struct {
	cfg     Config
	m       *metrics.APIMetrics
	limiter *failureLimiter
	srv     *http.Server
	// stopping ends when Run's context does: the long polls in progress
	// end with it, so a stop does not wait for them.
	stopping    context.Context
	stopWaiting context.CancelFunc

	mu sync.Mutex
	ln net.Listener // set by Start
}

// New validates cfg (Config.Validate's error) and returns a server that
// is not listening yet.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &Server{cfg: cfg, m: cfg.Metrics.API(), limiter: newFailureLimiter(cfg.FailedAuthEvery, cfg.FailedAuthBurst, SourcesMaxDefault)}
	s.stopping, s.stopWaiting = context.WithCancel(context.Background())
	s.srv = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WaitMax + WriteTimeoutMargin,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          nil,
	}
	return s, nil
}

// Start listens on Config.Listen, with TLS when a certificate is
// configured (loaded now, so a bad one fails here). It returns once
// listening; Run serves. Errors: the address cannot be listened on, the
// certificate or key cannot be loaded.
func (s *Server) Start() error {
	var tlsCfg *tls.Config
	if s.cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("api: --tls-cert %s, --tls-key %s: %w", s.cfg.TLSCert, s.cfg.TLSKey, err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("api: listen %s: %w", s.cfg.Listen, err)
	}
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	return nil
}

// Addr is the address the server listens on ("" before Start).
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// TLS reports whether the server speaks HTTPS.
func (s *Server) TLS() bool { return s.cfg.TLSCert != "" }

// Run serves the listener Start opened until ctx ends, then stops taking
// connections, ends the waits in progress (each answered 503: wait
// again) and waits for the other requests in progress, at most
// WriteTimeoutMargin, and returns nil. Errors: Start was not called; the
// listener failed.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return errors.New("api: Run before Start")
	}
	defer s.stopWaiting()
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("api: serve: %w", err)
	case <-ctx.Done():
	}
	s.stopWaiting()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), WriteTimeoutMargin)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-served
	if err != nil {
		return fmt.Errorf("api: stop: %w", err)
	}
	return nil
}

// Handler is the API's handler: every request authenticated (see
// authenticate), then routed (Routes), counted by route and status.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		mux.Handle(rt.Method+" "+rt.Pattern, counted(rt.Method+" "+rt.Pattern, require(rt.Need, rt.handle)))
	}
	for _, p := range routePaths(s.routes()) {
		mux.HandleFunc(p.pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", p.allow)
			writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: errorObject{Code: CodeMethodNotAllowed,
				Message: fmt.Sprintf("%s %s: this route takes %s", r.Method, r.URL.Path, p.allow)}})
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, errorBody{Error: errorObject{Code: CodeNotFound,
			Message: fmt.Sprintf("no route %s %s (the routes are under /v1: docs/openapi.yaml)", r.Method, r.URL.Path)}})
	})
	return s.count(s.authenticate(mux))
}

// count counts every answered request by route and status.
func (s *Server) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		s.m.Requests.WithLabelValues(cmp.Or(rec.route, "unmatched"), strconv.Itoa(rec.status)).Inc()
	})
}

// counted runs h for the route named route ("GET /v1/runs/{id}"), whose
// requests count under that name.
func counted(route string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if rec, ok := w.(*statusRecorder); ok {
			rec.route = route
		}
		h(w, r)
	}
}

// statusRecorder remembers the status a handler wrote and the route that
// answered ("" for none).
type statusRecorder struct {
	http.ResponseWriter
	status int
	route  string
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the connection.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
