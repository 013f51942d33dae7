package dashboard_test

import (
	"context"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outboxkit/contrib/dashboard"
)

// mount is docs/DASHBOARD.md's "Mounting it in a service".
func mount(mux *http.ServeMux, pool *pgxpool.Pool) error {
	h, err := dashboard.New(dashboard.Config{
		Targets:  []dashboard.Target{{Pool: pool}, {Pool: pool, Table: "billing_inbox", Inbox: true}},
		Auth:     dashboard.Auth{Token: os.Getenv("OUTBOX_DASHBOARD_TOKEN")},
		BasePath: "/outbox",
	})
	if err != nil {
		return err
	}
	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
	return nil
}

// The dashboard under /outbox/ of a service's own mux.
func ExampleNew() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	if err := mount(mux, pool); err != nil {
		panic(err)
	}
	_ = http.ListenAndServe("127.0.0.1:8089", mux)
}
