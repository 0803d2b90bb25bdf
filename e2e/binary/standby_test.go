package binary

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/opsapi"
)

// TestReadYourWritesStreamingFromStandby (issue 16): `decant run` streams
// from a hot standby (postgres.dsn, PostgreSQL 16+) and builds documents
// from the primary (postgres.build_dsn). An application writes to the
// primary, reads pg_current_wal_lsn() there and waits on /v1/wait: the
// write must be searchable each time. Then Elasticsearch equals the
// oracle, and the build stage's connections are on the primary.
func TestReadYourWritesStreamingFromStandby(t *testing.T) {
	testenv.StandbyVersion(t)
	spec := items
	spec.HTTP = true
	p := testenv.NewPipeline(t, spec)
	p.PG.Exec(t, `CREATE PUBLICATION decant FOR ALL TABLES;
INSERT INTO items SELECT g, 'before ' || g, 1 + g % 2 FROM generate_series(1, 1000) g`)
	standby := testenv.Standby(t, p.PG)
	// A standby creates a logical slot once a running-transactions record
	// of the primary reaches it: an idle primary writes one every 15 s.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			_, _ = p.PG.Pool.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	run := p.Start("run", []string{"DECANT_POSTGRES_DSN=" + standby, "DECANT_POSTGRES_BUILD_DSN=" + p.PG.DSN}, "run")
	p.WaitConverged(2 * time.Minute)

	cl := opsapi.NewClient("http://" + p.HTTP)
	var total time.Duration
	const iterations = 30
	for i := 1; i <= iterations; i++ {
		name := fmt.Sprintf("written-%d", i)
		p.PG.Exec(t, `INSERT INTO items VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET name = excluded.name`, i, name, 1+i%2)
		started := time.Now()
		if err := cl.Wait(context.Background(), lsn(t, p), time.Minute); err != nil {
			t.Fatalf("iteration %d: /v1/wait: %v", i, err)
		}
		total += time.Since(started)
		q := url.QueryEscape(fmt.Sprintf(`name.keyword:"%s"`, name))
		code, body, err := testenv.Get(p.ES.URL + "/" + p.Alias + "/_search?q=" + q)
		if err != nil || code != 200 || !strings.Contains(body, `"total":{"value":1,`) {
			t.Fatalf("iteration %d: write %q not found right after /v1/wait returned: %d %s %v", i, name, code, body, err)
		}
	}
	p.WaitConverged(time.Minute)
	var onPrimary int
	if err := p.PG.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name = 'decant-run'`, p.PG.Name).Scan(&onPrimary); err != nil {
		t.Fatal(err)
	}
	if onPrimary == 0 {
		t.Errorf("no connection of decant run on the primary: postgres.build_dsn unused")
	}
	if strings.Contains(run.Output(), "level=ERROR") {
		t.Errorf("decant run logged an error:\n%s", run.Tail(30))
	}
	t.Logf("%d writes on the primary searchable after /v1/wait with the stream on the standby; mean wait %s; %d connections on the primary", iterations, (total / iterations).Round(time.Millisecond), onPrimary)
}
