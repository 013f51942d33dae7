package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// connect opens a pool and checks the server answers, turning the usual
// failure into a message that says what to do.
func connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL %q is not a PostgreSQL URL: %v", redact(url), err)
	}
	cfg.MaxConns = 16
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(pctx, cfg)
	if err == nil {
		err = pool.Ping(pctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("cannot reach PostgreSQL at %s (%v): start it (e.g. pg_ctlcluster 15 main start) or point DATABASE_URL at one", redact(url), oneLine(err))
	}
	return pool, nil
}

// serve serves h on a free loopback port.
func serve(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// serveLazy serves the handler made by mk at path on a free loopback port;
// mk learns the endpoint's URL first, because the receiver must know the
// exact URL QStash signs.
func serveLazy(mk func(url string) (http.Handler, error), path string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	url := "http://" + ln.Addr().String() + path
	h, err := mk(url)
	if err != nil {
		ln.Close()
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+path, h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return url, func() { _ = srv.Close() }, nil
}

// waitFor waits until cond holds, checking every 10ms.
func waitFor(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func redact(url string) string {
	at := strings.LastIndex(url, "@")
	scheme := strings.Index(url, "://")
	if at < 0 || scheme < 0 || scheme > at {
		return url
	}
	if colon := strings.Index(url[scheme+3:at], ":"); colon >= 0 {
		return url[:scheme+3+colon] + ":***" + url[at:]
	}
	return url
}

// oneLine folds a multi-line driver error into one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
