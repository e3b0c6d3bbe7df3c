// Package api is the example program's HTTP API: a login route with its
// own limit, a per-API-key quota on the reports, a global limit per
// client IP for everything else, and an exempt health route. It takes any
// limiter.Store, so the same handler runs on memory, Redis, or an
// embedded ringlimit node.
package api

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"time"

	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// Config sets the limits. The zero value uses the defaults.
type Config struct {
	// Global is the limit per client IP of every route without its own.
	// Default 100 per minute.
	Global limiter.Limit
	// Login is the limit per client IP of POST /login. Default 5 per 15
	// minutes.
	Login limiter.Limit
	// Reports is the quota per API key (X-API-Key) of GET /reports.
	// Default 1000 per hour, as a sliding window.
	Reports limiter.Limit
	// Logger receives the limiter's logs. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Global == (limiter.Limit{}) {
		c.Global = limiter.Limit{Uses: 100, Window: time.Minute}
	}
	if c.Login == (limiter.Limit{}) {
		c.Login = limiter.Limit{Uses: 5, Window: 15 * time.Minute}
	}
	if c.Reports == (limiter.Limit{}) {
		c.Reports = limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 1000, Window: time.Hour}
	}
	return c
}

// New returns the API behind its rate limits, or the *limiter.InputError
// of a bad limit or a nil store.
func New(store limiter.Store, cfg Config) (http.Handler, error) {
	cfg = cfg.withDefaults()
	mw, err := httplimit.New(store, httplimit.Options{
		Limit: cfg.Global,
		Routes: []httplimit.Rule{
			httplimit.Route("POST /login", cfg.Login),
			{Pattern: "GET /reports", Limit: cfg.Reports, Key: httplimit.HeaderKey("X-API-Key"), Name: "reports"},
			httplimit.Exempt("GET /healthz"),
		},
		Headers: httplimit.HeadersStandard | httplimit.HeadersDraft,
		Logger:  cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", login)
	mux.HandleFunc("GET /reports", reports)
	mux.HandleFunc("GET /hello", hello)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, map[string]string{"status": "ok"}) })
	return mw(mux), nil
}

// NewHandler is New with the default limits. A nil store is the only
// error it can meet; it then returns a handler answering 500, so build
// with New to see the error.
func NewHandler(store limiter.Store) http.Handler {
	h, err := New(store, Config{})
	if err != nil {
		msg := err.Error()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, msg, http.StatusInternalServerError)
		})
	}
	return h
}

func login(w http.ResponseWriter, r *http.Request) {
	// A real service checks the password here.
	writeJSON(w, map[string]string{"token": "example-token"})
}

func reports(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]any{"account": r.Header.Get("X-API-Key"), "reports": []string{}})
}

func hello(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, map[string]string{"hello": "world"})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
