package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/mappings"
)

// writeConfig writes decant.yaml and mapping files into a temp dir and
// returns the config path.
func writeConfig(t *testing.T, dsn string, createPub bool, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "mappings"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, "mappings", name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := fmt.Sprintf("postgres:\n  dsn: %q\n  publication: decant\n  slot: decant\n  create_publication: %v\nelasticsearch:\n  urls: [%s]\nmappings: [mappings/*.yaml]\n",
		dsn, createPub, testenv.ESURL())
	path := filepath.Join(dir, "decant.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// runCmd runs the command name with args and returns its exit code, stdout
// and stderr.
func runCmd(t *testing.T, name string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := commands[name].run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func shopSQL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../mappings/testdata/shop.sql")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const badMapping = `version: 1
aggregates:
  customer:
    table: customers
    relations:
      orders: {table: orders, foreign_key: customer_id}
      address: {table: addresses, references: address_id}
  ghost: {table: ghosts}
  nocol: {table: products, columns: [id, nope]}
  invoice:
    table: customers
    relations:
      invoices: {table: invoices, foreign_key: customer_ref}
`

// Acceptance 3: every problem is reported with its fix, and check exits 1.
func TestCheckReportsEveryProblem(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, shopSQL(t))
	role := "decant_check_" + testenv.Suffix()
	pg.Exec(t, `DROP INDEX orders_customer_id_idx;
CREATE TABLE invoices (id int PRIMARY KEY, customer_ref text);
CREATE PUBLICATION decant FOR TABLE customers;
CREATE ROLE `+role+` LOGIN;
GRANT SELECT ON customers, orders, products, invoices TO `+role)
	t.Cleanup(func() {
		_, _ = pg.Pool.Exec(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role)
	})
	u, _ := url.Parse(pg.DSN)
	u.User = url.User(role)
	cfg := writeConfig(t, u.String(), true, map[string]string{"bad.yaml": badMapping})

	code, out, errOut := runCmd(t, "check", "--config", cfg, "--json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", code, out, errOut)
	}
	var rep mappings.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	want := []struct{ sev, table, msg, fix string }{
		{"error", "", "aggregates.ghost.table: table public.ghosts does not exist", "edit "},
		{"error", "", `aggregates.nocol.columns.1: columns: column "nope" does not exist in table public.products`, "edit "},
		{"error", "", "public.invoices.customer_ref (text) cannot be joined with public.customers.id (integer)", `ALTER TABLE "public"."invoices" ALTER COLUMN "customer_ref" TYPE integer USING "customer_ref"::integer;`},
		{"error", "", "lacks the REPLICATION attribute", `ALTER ROLE "` + role + `" REPLICATION;`},
		{"warning", "public.orders", "is not in publication decant: decant run adds it", `ALTER PUBLICATION "decant" ADD TABLE "public"."orders";`},
		{"warning", "public.addresses", "is not in publication decant: decant run adds it", `ALTER PUBLICATION "decant" ADD TABLE "public"."addresses";`},
		{"error", "public.addresses", "may not SELECT", `GRANT SELECT ON "public"."addresses" TO "` + role + `";`},
		{"error", "public.orders", "resolution reads customer_id from the before image", `ALTER TABLE "public"."orders" REPLICA IDENTITY FULL;`},
		{"warning", "public.orders", "no index starts with (customer_id)", `CREATE INDEX ON "public"."orders" ("customer_id");`},
	}
	for _, w := range want {
		found := false
		for _, p := range rep.Problems {
			if string(p.Severity) == w.sev && p.Table == w.table && strings.Contains(p.Message, w.msg) && strings.Contains(p.Fix, w.fix) {
				found = true
			}
		}
		if !found {
			t.Errorf("missing %s %s %q (fix %q)", w.sev, w.table, w.msg, w.fix)
		}
	}
	if t.Failed() {
		t.Logf("report:\n%s", out)
	}
	// The text output says the same.
	code, text, _ := runCmd(t, "check", "--config", cfg)
	t.Logf("decant check output:\n%s", text)
	if code != 1 || !strings.Contains(text, "fix: ALTER TABLE \"public\".\"orders\" REPLICA IDENTITY FULL;") {
		t.Errorf("text output (exit %d):\n%s", code, text)
	}
}

// Acceptance 3: a correct setup passes.
func TestCheckCorrectSetup(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, shopSQL(t))
	pg.Exec(t, `ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE order_lines REPLICA IDENTITY FULL;
CREATE PUBLICATION decant FOR ALL TABLES`)
	cfg := writeConfig(t, pg.DSN, false, map[string]string{"shop.yaml": productExample})
	code, out, errOut := runCmd(t, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "ok: 1 aggregate(s) checked") {
		t.Errorf("output:\n%s", out)
	}
}

// TestCheckOnStandby: decant check against a hot standby (PostgreSQL 16+,
// issue 16) reads its settings there; the standby e2e/infra/pg.sh starts
// (hot_standby_feedback on, primary_slot_name set) passes. The problems of
// a wrong standby are in mappings.TestCheckStandby.
func TestCheckOnStandby(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, shopSQL(t))
	pg.Exec(t, `ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE order_lines REPLICA IDENTITY FULL;
CREATE PUBLICATION decant FOR ALL TABLES`)
	cfg := writeConfig(t, testenv.Standby(t, pg), true, map[string]string{"shop.yaml": productExample})
	code, out, errOut := runCmd(t, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "ok: 1 aggregate(s) checked") || strings.Contains(out, "standby") {
		t.Errorf("output:\n%s", out)
	}
}

// Acceptance 4: init on a schema with all relation kinds writes a mapping
// that passes check and whose documents build.
func TestInitThenCheckAndBuild(t *testing.T) {
	pg := testenv.Postgres(t)
	kinds, err := os.ReadFile("../../mappings/testdata/kinds.sql")
	if err != nil {
		t.Fatal(err)
	}
	pg.Exec(t, string(kinds))
	cfg := writeConfig(t, pg.DSN, false, map[string]string{"placeholder.yaml": "version: 1\naggregates:\n  x: {table: users}\n"})
	outFile := filepath.Join(filepath.Dir(cfg), "mappings", "generated.yaml")
	code, _, errOut := runCmd(t, "init", "--config", cfg, "--out", outFile)
	if code != 0 {
		t.Fatalf("init: exit %d: %s", code, errOut)
	}
	if err := os.Remove(filepath.Join(filepath.Dir(cfg), "mappings", "placeholder.yaml")); err != nil {
		t.Fatal(err)
	}
	// Before the replica identities are set, check asks for them.
	pg.Exec(t, "CREATE PUBLICATION decant FOR ALL TABLES")
	code, out, _ := runCmd(t, "check", "--config", cfg)
	if code != 1 || !strings.Contains(out, "REPLICA IDENTITY FULL") {
		t.Fatalf("check before replica identity: exit %d\n%s", code, out)
	}
	pg.Exec(t, `DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT schemaname, tablename FROM pg_tables WHERE schemaname IN ('public', 'billing') LOOP
    EXECUTE format('ALTER TABLE %I.%I REPLICA IDENTITY FULL', r.schemaname, r.tablename);
  END LOOP; END $$`)
	code, out, errOut = runCmd(t, "check", "--config", cfg)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("decant check output:\n%s", out)
	// Every aggregate builds, and has documents.
	data, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	set, err := mappings.Load([]mappings.File{{Name: outFile, Data: data}})
	if err != nil {
		t.Fatal(err)
	}
	cat, err := mappings.ReadCatalog(context.Background(), pg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	model, err := mappings.Bind(set, cat)
	if err != nil {
		t.Fatal(err)
	}
	if len(model.Aggregates) < 4 {
		t.Errorf("only %d aggregates", len(model.Aggregates))
	}
	for _, a := range model.Aggregates {
		var n int
		sql := "SELECT count(*) FROM (" + a.Build.SQL + ") d"
		rows, err := pg.Pool.Query(context.Background(), "SELECT to_jsonb("+strings.Join(a.ID, ")::text, to_jsonb(")+")::text FROM "+a.Table.Sanitize())
		if err != nil {
			t.Fatal(err)
		}
		var keys [][]json.RawMessage
		for rows.Next() {
			vals := make([]string, len(a.ID))
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			key := make([]json.RawMessage, len(vals))
			for i, v := range vals {
				key[i] = json.RawMessage(v)
			}
			keys = append(keys, key)
		}
		rows.Close()
		args, err := a.Build.Args(keys)
		if err != nil {
			t.Fatal(err)
		}
		if err := pg.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v\n%s", a.Name, err, a.Build.SQL)
		}
		if n != len(keys) || n == 0 {
			t.Errorf("%s: built %d documents for %d ids", a.Name, n, len(keys))
		}
	}
}

func TestExplain(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, shopSQL(t))
	cfg := writeConfig(t, pg.DSN, true, map[string]string{"shop.yaml": productExample})
	code, out, errOut := runCmd(t, "explain", "customer", "--config", cfg)
	if code != 0 || !strings.Contains(out, `string_agg(`) || !strings.Contains(out, "-- route aggregates.customer.relations.tags.through") {
		t.Errorf("exit %d\n%s%s", code, out, errOut)
	}
	code, out, _ = runCmd(t, "explain", "--config", cfg, "customer", "--index")
	if code != 0 || !strings.Contains(out, `"nested"`) {
		t.Errorf("--index: exit %d\n%s", code, out)
	}
	code, _, errOut = runCmd(t, "explain", "--config", cfg, "custmer")
	if code != 1 || !strings.Contains(errOut, "the mappings define: customer") {
		t.Errorf("unknown aggregate: exit %d %s", code, errOut)
	}
}

func TestCheckMappingErrorsNeedNoDatabase(t *testing.T) {
	cfg := writeConfig(t, "postgres://nobody@127.0.0.1:1/none", true, map[string]string{"a.yaml": "version: 1\naggregates:\n  a: {tabel: x}\n"})
	code, out, _ := runCmd(t, "check", "--config", cfg)
	if code != 1 || !strings.Contains(out, `a.yaml:3:7: aggregates.a.tabel: unknown key "tabel"; did you mean "table"?`) {
		t.Errorf("exit %d\n%s", code, out)
	}
}

func TestHelp(t *testing.T) {
	for _, name := range []string{"check", "init", "explain"} {
		var out, errb bytes.Buffer
		if code := commands[name].run(context.Background(), []string{"--help"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "Examples:") {
			t.Errorf("%s --help: exit %d\n%s", name, code, errb.String())
		}
	}
}

// productExample is the PRODUCT.md §3 mapping (as in mappings tests).
var productExample = func() string {
	b, err := os.ReadFile("../../mappings/testdata/product_example.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// TestCheckSearchEngines (issue 17): decant check asks each search engine
// what it is and refuses one configured under the other engine's section,
// naming the key to fix; both engines configured right pass.
func TestCheckSearchEngines(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, shopSQL(t))
	pg.Exec(t, `ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE order_lines REPLICA IDENTITY FULL;
CREATE PUBLICATION decant FOR ALL TABLES`)
	testenv.OpenSearch(t) // fails under CI when the node is missing
	es, os := testenv.ESURL(), testenv.OSURL()
	for _, c := range []struct {
		name           string
		esURLs, osURLs string
		code           int
		want           string
	}{
		{"both right", es, os, 0, "ok: 1 aggregate(s) checked"},
		{"opensearch only", "", os, 0, "ok: 1 aggregate(s) checked"},
		{"opensearch under elasticsearch", os, "", 1, "the server is not Elasticsearch"},
		{"elasticsearch under opensearch", "", es, 1, "opensearch.urls [" + es + "]: the server is elasticsearch 7."},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := writeConfig(t, pg.DSN, false, map[string]string{"shop.yaml": productExample})
			t.Setenv("DECANT_ELASTICSEARCH_URLS", c.esURLs)
			t.Setenv("DECANT_OPENSEARCH_URLS", c.osURLs)
			code, out, errOut := runCmd(t, "check", "--config", cfg)
			if code != c.code || !strings.Contains(out+errOut, c.want) {
				t.Errorf("exit %d, want %d and %q in:\n%s%s", code, c.code, c.want, out, errOut)
			}
		})
	}
}

// TestCheckFailoverSettings: decant check with a postgres.dsn listing the
// primary and the standby of e2e/infra/pg.sh failover-up (PostgreSQL 17+,
// issue 16) reads both; the pair as set up passes with no failover
// problem, and each setting undone is reported with the server it is on.
// Every combination is in mappings.TestCheckFailover.
func TestCheckFailoverSettings(t *testing.T) {
	pair := testenv.Failover(t)
	pg := testenv.PostgresOn(t, pair.Admin)
	pg.Exec(t, shopSQL(t))
	pg.Exec(t, `ALTER TABLE orders REPLICA IDENTITY FULL;
ALTER TABLE order_lines REPLICA IDENTITY FULL;
CREATE PUBLICATION decant FOR ALL TABLES`)
	failoverProblems := func(dsn string) (int, []string, string) {
		t.Helper()
		code, out, errOut := runCmd(t, "check", "--config", writeConfig(t, dsn, true, map[string]string{"shop.yaml": productExample}), "--json")
		var rep mappings.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%v\n%s%s", err, out, errOut)
		}
		var got []string
		for _, p := range rep.Problems {
			if strings.Contains(p.Message, "synchroniz") || strings.Contains(p.Message, "standby") || strings.Contains(p.Message, "target_session_attrs") {
				got = append(got, p.String())
			}
		}
		return code, got, out
	}
	if code, got, out := failoverProblems(pg.DSN); code != 0 || len(got) != 0 {
		t.Fatalf("the failover pair as set up: exit %d, failover problems %q\n%s", code, got, out)
	}
	standby := pgAt(t, pair.Standby)
	primary := pgAt(t, pair.Primary)
	for _, sql := range []struct {
		conn *pgx.Conn
		sql  string
	}{
		{standby, `ALTER SYSTEM SET sync_replication_slots = off`}, {standby, `SELECT pg_reload_conf()`},
		{primary, `ALTER SYSTEM RESET synchronized_standby_slots`}, {primary, `SELECT pg_reload_conf()`},
	} {
		if _, err := sql.conn.Exec(context.Background(), sql.sql); err != nil {
			t.Fatal(err)
		}
	}
	su, _ := url.Parse(pair.Standby)
	standbyAddr := su.Host
	want := []string{"warning: synchronized_standby_slots is empty on the primary", "warning: the standby " + standbyAddr + " has sync_replication_slots = off"}
	testenv.WaitFor(t, "decant check to report the settings undone", 30*time.Second, func() (bool, error) {
		code, got, _ := failoverProblems(pg.DSN)
		ok := code == 0 && len(got) == len(want)
		for i := 0; ok && i < len(want); i++ {
			ok = strings.Contains(got[i], want[i])
		}
		return ok, fmt.Errorf("exit %d, problems %q, want %q", code, got, want)
	})
	// Without target_session_attrs decant may reach the standby first.
	u, _ := url.Parse(pg.DSN)
	q := u.Query()
	q.Del("target_session_attrs")
	u.RawQuery = q.Encode()
	if _, got, out := failoverProblems(u.String()); !slices.ContainsFunc(got, func(s string) bool { return strings.Contains(s, "without target_session_attrs=primary") }) {
		t.Errorf("a DSN of two hosts without target_session_attrs: problems %q\n%s", got, out)
	}
}

// pgAt connects to dsn for the test.
func pgAt(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestTargetSessionAttrs(t *testing.T) {
	for dsn, want := range map[string]string{
		"postgresql://u@db1:5432,db2:5432/shop?target_session_attrs=primary":      "primary",
		"postgres://u@db1/shop?sslmode=disable&target_session_attrs=read-write":   "read-write",
		"host=db1,db2 port=5432,5432 dbname=shop target_session_attrs=primary":    "primary",
		"host=db1 dbname=shop target_session_attrs = 'read-write' user=decant":    "read-write",
		"postgresql://u@db1:5432,db2:5432/shop":                                   "",
		"host=db1,db2 dbname=shop application_name=xtarget_session_attrs=primary": "",
	} {
		t.Setenv("PGTARGETSESSIONATTRS", "")
		if got := targetSessionAttrs(dsn); got != want {
			t.Errorf("targetSessionAttrs(%q) = %q, want %q", dsn, got, want)
		}
	}
}
