// Package dashboard is outboxkit's web page for operators: an http.Handler
// a service mounts (or `outboxctl dashboard` serves) that shows each
// outbox and inbox table — pending, leased and dead-lettered counts, the
// oldest pending age, published events per second and commit → publish
// latency over the last hour, per destination — lists and filters events,
// shows one event in full, and groups dead letters by type and normalised
// error for replay or purge.
//
//	h, err := dashboard.New(dashboard.Config{
//		Targets: []dashboard.Target{{Pool: pool}}, // public.outbox_events
//		Auth:    dashboard.Auth{Token: os.Getenv("OUTBOX_DASHBOARD_TOKEN")},
//	})
//	mux.Handle("/outbox/", http.StripPrefix("/outbox", h))
//
// # Safety
//
// Without Auth the handler answers only requests from a loopback address
// whose Host is a loopback name, and CheckListen refuses a non-loopback
// listening address; with Auth every request must carry the bearer token
// (or the session cookie /login sets after it), the basic-auth
// credentials, or the trusted proxy's header. Every change is a POST that
// must pass net/http's cross-origin protection and carry the page's CSRF
// token; ReadOnly refuses them all. Pages are html/template and a strict
// Content-Security-Policy (scripts and styles from the handler only), so a
// value from the database is always text. Headers whose names match
// RedactHeaders, and URL credentials in errors and destinations, are shown
// as [redacted]. Each change is logged once, with who did it and how many
// rows it touched.
//
// # Cost
//
// Every events page walks one index in its order from the cursor (the
// primary key, the pending, published or dead-letter index) and examines
// at most ScanLimit rows for its filters, so a page costs the same on a
// table of a thousand events or of a billion; the overview reads the
// pending and dead-lettered rows and the last hour's published ones
// (docs/DASHBOARD.md has the figures).
//
// # Partitioned tables
//
// On the partitioned layout (postgres.MigrateConfig.Partitions) the same
// walks are a merge of each partition's copy of the index, and a
// creation-time filter first reads the partition bounds from the catalog
// so that the partitions wholly outside it are pruned. The overview shows
// each table's layout: its partitions, their oldest and newest period,
// and the default partition's rows, whose pending or published ones mean
// the retention leader has not created their periods' partitions. An ID
// is unique per partition only there: the event page of an ID that two
// rows hold shows one of them and links the other, and a confirmation
// counts every dead-lettered row an action on its IDs touches.
package dashboard
