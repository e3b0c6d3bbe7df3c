// Command http runs the example API of ringlimit's httplimit middleware
// on an in-memory store:
//
//	go run ./examples/http -addr 127.0.0.1:8080
//
// See README.md for the requests to try.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/ringlimit/ringlimit/examples/http/api"
	"github.com/ringlimit/ringlimit/limiter"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*addr, logger); err != nil {
		logger.Error("example stopped", "err", err)
		os.Exit(1)
	}
}

func run(addr string, logger *slog.Logger) error {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	h, err := api.New(store, api.Config{Logger: logger})
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	logger.Info("listening", "addr", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
