// Package opsapi is decant's public operations API over HTTP: the server
// every decant process runs on http.listen, and the Go client applications
// use for read-your-writes. Both sides live here so the routes, their
// parameters and their status codes are written once (docs/formats.md
// documents them for other languages).
//
//	GET /metrics        Prometheus metrics of the process
//	GET /healthz        200 while the process runs
//	GET /readyz         200 when every stage of the process runs, else 503
//	                    (with why, for a stage stopped on a mapping error)
//	GET /v1/watermarks  how far each stage has got (watermark.Watermarks)
//	GET /v1/wait        ?lsn=&timeout=: 200 once the LSN is in every sink
//	                    and searchable, 408 on timeout
//	GET /               the live pipeline page (page.go, static/), which
//	                    draws GET /v1/pipeline (Pipeline)
//
// An application commits, reads pg_current_wal_lsn() and waits for it:
//
//	var lsn string
//	_ = db.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
//	c := opsapi.NewClient("http://decant:8080")
//	if err := c.Wait(ctx, lsn, 5*time.Second); err != nil { … } // now searchable
//
// The server (NewServer, Serve) answers from a watermark.Tracker, which
// reads positions PostgreSQL and Kafka already store, so any process can
// serve /v1/wait for stages running elsewhere.
package opsapi

// The routes of the API.
const (
	PathWatermarks = "/v1/watermarks"
	PathWait       = "/v1/wait"
)
