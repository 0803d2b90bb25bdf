package e2e

import (
	"net/url"
	"testing"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/resolver"
)

// TestResolverPoolSessions: the resolver's connections (resolver.NewPool)
// run under the session settings documents are built under, and with JIT
// compilation off, which the database's own default does not change; a
// DSN that sets jit keeps its value.
func TestResolverPoolSessions(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Ctx(t)
	pg.Exec(t, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET jit = on', current_database()); END $$`)
	show := func(dsn string, names ...string) map[string]string {
		t.Helper()
		pool, err := resolver.NewPool(ctx, dsn, "decant-test", 1)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		got := map[string]string{}
		for _, name := range names {
			var v string
			if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
				t.Fatalf("current_setting(%s): %v", name, err)
			}
			got[name] = v
		}
		return got
	}
	names := []string{"jit"}
	for k := range resolver.SessionParams {
		names = append(names, k)
	}
	got := show(pg.DSN, names...)
	if got["jit"] != "off" {
		t.Errorf("jit = %q in the resolver's sessions, want off (the database's default is on)", got["jit"])
	}
	for k, want := range resolver.SessionParams {
		if got[k] != want {
			t.Errorf("%s = %q, want %q", k, got[k], want)
		}
	}
	u, err := url.Parse(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("jit", "on")
	u.RawQuery = q.Encode()
	if got := show(u.String(), "jit")["jit"]; got != "on" {
		t.Errorf("jit = %q with jit=on in the DSN, want on", got)
	}
}
