// The catalogue of bad inputs (issue 7; PRODUCT.md §6.5: bad input is
// refused clearly, nothing is dropped silently). For each: what decant
// does, and the test that asserts the message and that nothing was lost.
// Tests named without a path are in this file; they drive the real decant
// binary (`decant run`, built by TestMain) against the shared servers,
// isolated by database, topic prefix, index and slot.
//
//  1. Malformed YAML, unknown keys, wrong types in decant.yaml: exit 2
//     with file:line:column and the fix, nothing created —
//     e2e/binary/badconfig_test.go TestBadConfigFailsBeforeSideEffects
//     ("unknown key", "wrong type"); config/config_test.go
//     TestLoadErrorsHavePositions, TestWrongShapes.
//  2. Bad environment overrides: same test ("bad env override");
//     config/config_test.go TestLoadEnvErrors.
//  3. Malformed mappings, unknown tables or columns, ambiguous joins,
//     cycles: file:line:column and the fix — mappings/load_test.go
//     TestLoadErrors, TestLoadReportsAllErrors; against the live catalog
//     with the fixing SQL: cmd/decant/cmd_check_test.go
//     TestCheckReportsEveryProblem, TestCheckMappingErrorsNeedNoDatabase.
//  4. Wrong credentials: e2e/binary TestBadConfigFailsBeforeSideEffects
//     ("wrong password": PostgreSQL's reason, the key to check, the
//     password never printed). The test servers run without Kafka SASL or
//     Elasticsearch security, so those refusals (indexer.Ping
//     401/403) are not exercised against a server.
//  5. Unreachable servers at start: e2e/binary
//     TestBadConfigFailsBeforeSideEffects ("unreachable kafka",
//     "unreachable elasticsearch", "unreachable postgres").
//  6. Unreachable servers mid-run: TestServersUnreachableMidRun
//     (Elasticsearch and PostgreSQL cut by proxies: a warning naming the
//     address, retries, convergence). Kafka cannot be cut per client (the
//     broker's advertised address bypasses a proxy) and the shared broker
//     must not stop: e2e/chaos TestChaos restarts it (0 mismatches).
//  7. Slot held by another process: TestSlotHeldByAnotherProcess (decant
//     stands by, says so, takes over when released, streams what was
//     committed meanwhile); streamer/reliability_e2e_test.go TestTakeover
//     (kill -9 of the active streamer).
//  8. Publication dropped mid-run: TestPublicationDropped. Changes
//     committed while it was missing can never be decoded through the slot
//     (PostgreSQL 15), so decant must stop naming the publication and the
//     recovery (drop the slot, restart: new snapshot); streamer/replicate.go
//     replicationError makes that error permanent.
//  9. Replica identity changed back to DEFAULT: at start, `decant run`
//     refuses (exit 2, the table and ALTER TABLE … REPLICA IDENTITY FULL);
//     mid-run, updates and deletes lacking the before image go to the
//     dead-letter topic with the fix, are counted and logged —
//     TestReplicaIdentityDefaultMidRun (both, and the fix converges).
// 10. A topic deleted mid-run: TestRawTopicDeleted (the stream session
//     fails naming the topic and does not confirm the slot past the
//     unwritten changes; the next session, or a restart, recreates the
//     topic and streams them),
//     TestRefsTopicDeleted (map and build recreate it by themselves).
//     Records that were in the deleted topic are gone with it; documents
//     they had not yet reached are rebuilt by `decant backfill`.
// 11. Elasticsearch index made read-only: e2e/indexer_es_test.go
//     TestESSinkRetriesReadOnlyIndex (retried with backoff, never
//     dead-lettered, written once the block is lifted).
// 12. Oversized documents: e2e/indexer_kafka_test.go
//     TestKafkaSinkTooLargeGoesToDLQ (larger than Kafka accepts);
//     e2e/indexer_es_test.go TestESSinkDeadLetters (documents
//     Elasticsearch refuses). A document above Elasticsearch's
//     http.max_content_length (a node setting, 100 MB) is not tested: the
//     shared node keeps its default.
// 13. Rows with values that cannot be encoded: every PostgreSQL value has
//     a text form and malformed structured text falls back to a JSON
//     string (streamer/encode_test.go TestEncodeValueMalformed,
//     TestEncodeTuple; FuzzEncodeValue), so the row that cannot be written
//     is one whose raw event exceeds Kafka's limit: TestOversizedRawEvent
//     (dead letter with key, topic, size and reason; counted; logged; the
//     rest streams on; `decant backfill` rebuilds its documents).
// 14. Disk full on the refs path: TestRefsTopicRefusesWrites, simulated by
//     shrinking the refs topic's max.message.bytes below one ref, so the
//     broker refuses every write to it (the map stage fails its batch
//     naming the topic, commits nothing past it, retries with backoff,
//     converges once lifted). A real full disk would take the shared
//     broker's only log directory offline for every test; a client quota
//     only throttles (Kafka never refuses a write for a quota) and applies
//     per client id or user, which every test's client shares here.

package badinput

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/wire"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests mostly wait for servers and child processes: run them all
	// at once unless -parallel says otherwise (its default is GOMAXPROCS).
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		_ = flag.Set("test.parallel", "8")
	}
	code := m.Run()
	testenv.RemoveDecant()
	os.Exit(code)
}

// pipeline is one test's database, topic prefix, index, slot and config
// (with decant's HTTP port on).
type pipeline struct{ *testenv.Pipeline }

// shop: documents are categories with their items (one-to-many through
// items.category_id).
var shop = testenv.PipelineSpec{
	Schema:    testenv.ItemsSchema,
	Aggregate: "category",
	Mapping: `version: 1
schema: public
aggregates:
  category:
    table: categories
    columns: [id, title]
    relations:
      items:
        table: items
        foreign_key: category_id
        columns: [id, name]
    elasticsearch:
      index: %s
      settings: {number_of_shards: 1, number_of_replicas: 0}
`,
	// The documents computed from the database, independently of decant's SQL.
	OracleSQL: `
SELECT c.id::text, jsonb_build_object('id', c.id, 'title', c.title, 'items',
  coalesce((SELECT jsonb_agg(jsonb_build_object('id', i.id, 'name', i.name) ORDER BY i.id) FROM items i WHERE i.category_id = c.id), '[]'))::text
FROM categories c`,
	HTTP: true,
}

func newPipeline(t *testing.T) *pipeline { return newPipelineVia(t, "", "") }

// newPipelineVia is newPipeline with decant reaching PostgreSQL and
// Elasticsearch through the given addresses (proxies) when not empty.
func newPipelineVia(t *testing.T, pgAddr, esAddr string) *pipeline {
	t.Helper()
	spec := shop
	spec.PGAddr, spec.ESAddr = pgAddr, esAddr
	return &pipeline{testenv.NewPipeline(t, spec)}
}

// newConverged is a pipeline whose `decant run` (run-1) has indexed items
// 1 to 3 into category 1, with its initial snapshot done (the documents
// of a first start may converge before it: they are backfilled from the
// tables; a run stopped before its snapshot is marked done snapshots
// again on the next start).
func newConverged(t *testing.T) (*pipeline, *testenv.Proc) {
	t.Helper()
	p := newPipeline(t)
	run := p.start("run-1", "run")
	p.PG.Exec(t, insertItems(1, 3, 1))
	p.WaitConverged(90 * time.Second)
	var lsn string
	if err := p.PG.Pool.QueryRow(testenv.Ctx(t), `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	if err := opsapi.NewClient("http://"+p.HTTP).Wait(testenv.Ctx(t), lsn, 90*time.Second); err != nil {
		t.Fatalf("/v1/wait for %s (the initial snapshot and every stage): %v", lsn, err)
	}
	return p, run
}

// deletedMidRun deletes a topic (raw or refs) under a converged `decant
// run`, commits items 4 to 6 into category 2 and then sql, and waits for
// the log line matching re, in which {topic} stands for the topic's name.
func deletedMidRun(t *testing.T, topic func(*pipeline) string, re string, sql ...string) (*pipeline, *testenv.Proc) {
	t.Helper()
	p, run := newConverged(t)
	p.deleteTopic(topic(p))
	p.PG.Exec(t, insertItems(4, 6, 2))
	for _, s := range sql {
		p.PG.Exec(t, s)
	}
	waitLog(t, run, strings.ReplaceAll(re, "{topic}", regexp.QuoteMeta(topic(p))), 90*time.Second)
	return p, run
}

// backfill runs `decant backfill category` and fails unless it exits 0.
func (p *pipeline) backfill() {
	p.T.Helper()
	if out, code := p.decant(2*time.Minute, "backfill", "category"); code != 0 {
		p.T.Fatalf("decant backfill category: exit %d\n%s", code, out)
	}
}

// waitCategory2 waits until category 2's document contains part.
func (p *pipeline) waitCategory2(what, part string, timeout time.Duration) {
	p.T.Helper()
	testenv.WaitFor(p.T, what, timeout, func() (bool, error) {
		docs, err := p.ESDocs()
		return err == nil && strings.Contains(docs["2"], part), err
	})
}

func (p *pipeline) rawTopic() string  { return wire.RawTopic(p.Kafka.Prefix, "public", "items") }
func (p *pipeline) refsTopic() string { return wire.RefsTopic(p.Kafka.Prefix, "category") }
func (p *pipeline) dlqTopic() string  { return wire.DLQTopic(p.Kafka.Prefix) }

// start runs `decant args... --config <config>`; it is killed at cleanup.
func (p *pipeline) start(name string, args ...string) *testenv.Proc {
	p.T.Helper()
	return p.Start(name, nil, args...)
}

// stop sends SIGTERM and waits (SIGKILL after 60s).
func stop(pr *testenv.Proc) { pr.Term(60 * time.Second) }

// waitLog waits until the process's output matches re and returns the match.
func waitLog(t *testing.T, pr *testenv.Proc, re string, timeout time.Duration) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	var m string
	testenv.WaitFor(t, fmt.Sprintf("the log of %s to match %q", pr.Name, re), timeout, func() (bool, error) {
		m = rx.FindString(pr.Output())
		return m != "", nil
	})
	return m
}

// metric reads one sample of decant's /metrics: name with its labels as
// written, e.g. `decant_streamer_dlq_total`.
func (p *pipeline) metric(series string) (float64, error) {
	_, body, err := testenv.Get("http://" + p.HTTP + "/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			return f, err
		}
	}
	return 0, fmt.Errorf("no series %s in /metrics", series)
}

// rawChanges decodes the raw topic's change events (tombstones skipped).
func (p *pipeline) rawChanges() []wire.Change {
	p.T.Helper()
	var out []wire.Change
	for _, r := range p.Kafka.Records(p.T, p.rawTopic()) {
		if r.Value == nil {
			continue
		}
		var c wire.Change
		if err := json.Unmarshal(r.Value, &c); err != nil {
			p.T.Fatalf("raw record %s is not a change: %v", r.Value, err)
		}
		out = append(out, c)
	}
	return out
}

// rawMissing returns the item ids without an event of one of ops in the raw topic.
func (p *pipeline) rawMissing(ids []int, ops ...wire.Op) []int {
	seen := map[int]bool{}
	for _, c := range p.rawChanges() {
		var k struct{ ID int }
		_ = json.Unmarshal(c.Key, &k)
		for _, op := range ops {
			if c.Op == op {
				seen[k.ID] = true
			}
		}
	}
	var missing []int
	for _, id := range ids {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	return missing
}

// waitRaw waits until every item id has an event of one of ops in the raw
// topic, and returns those events by id.
func (p *pipeline) waitRaw(what string, ids []int, ops ...wire.Op) {
	p.T.Helper()
	testenv.WaitFor(p.T, what+" in the raw topic", 60*time.Second, func() (bool, error) {
		m := p.rawMissing(ids, ops...)
		return len(m) == 0, fmt.Errorf("missing items %v (ops %v)", m, ops)
	})
}

// commitLSNs returns, by item id, the source.commit_lsn of the raw events of ops.
func (p *pipeline) commitLSNs(ops ...wire.Op) map[int]uint64 {
	p.T.Helper()
	out := map[int]uint64{}
	for _, c := range p.rawChanges() {
		var k struct{ ID int }
		_ = json.Unmarshal(c.Key, &k)
		if slices.Contains(ops, c.Op) {
			lsn, err := wire.ParseLSN(c.Source.CommitLSN)
			if err != nil {
				p.T.Fatal(err)
			}
			out[k.ID] = lsn
		}
	}
	return out
}

// waitSlotReleased waits until no walsender holds the slot: a decant that
// exited leaves its walsender behind for a moment.
func (p *pipeline) waitSlotReleased() {
	p.T.Helper()
	testenv.WaitFor(p.T, "slot "+p.Slot+" to be released", 30*time.Second, func() (bool, error) {
		var active bool
		err := p.PG.Pool.QueryRow(context.Background(), `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, p.Slot).Scan(&active)
		return err == nil && !active, err
	})
}

// newProbe creates a second logical slot, with its own publication of
// items, to learn the commit LSN of later transactions on items (tests
// compare them with decant's slot); see probeCommits.
func (p *pipeline) newProbe() string {
	p.T.Helper()
	name := "probe_" + testenv.Suffix()
	p.PG.Exec(p.T, `CREATE PUBLICATION `+name+` FOR TABLE items`)
	p.PG.Exec(p.T, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, name)
	return name
}

// probeCommits returns the commit LSN (final_lsn of pgoutput's Begin: the
// start of the commit record, which PostgreSQL compares with a slot's
// confirmed position to skip a transaction) of every transaction on items
// since the probe was created.
func (p *pipeline) probeCommits(probe string) []uint64 {
	p.T.Helper()
	rows, err := p.PG.Pool.Query(context.Background(),
		`SELECT data FROM pg_logical_slot_peek_binary_changes($1::name, NULL, NULL, 'proto_version', '1', 'publication_names', $1::text)`, probe)
	if err != nil {
		p.T.Fatalf("peek probe slot: %v", err)
	}
	defer rows.Close()
	var out []uint64
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			p.T.Fatal(err)
		}
		if len(data) >= 9 && data[0] == 'B' {
			out = append(out, binary.BigEndian.Uint64(data[1:9]))
		}
	}
	if err := rows.Err(); err != nil {
		p.T.Fatal(err)
	}
	return out
}

// slotConfirmed is the slot's confirmed_flush_lsn.
func (p *pipeline) slotConfirmed() uint64 {
	p.T.Helper()
	var s string
	if err := p.PG.Pool.QueryRow(context.Background(), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, p.Slot).Scan(&s); err != nil {
		p.T.Fatalf("slot %s: %v", p.Slot, err)
	}
	v, err := wire.ParseLSN(s)
	if err != nil {
		p.T.Fatal(err)
	}
	return v
}

func ids(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

// decant runs a decant command to completion and returns its output and exit code.
func (p *pipeline) decant(timeout time.Duration, args ...string) (string, int) {
	p.T.Helper()
	pr := p.start(strings.Join(args, "-"), args...)
	code := pr.ExitCode(timeout)
	if code == -1 {
		p.T.Fatalf("decant %s did not exit within %s:\n%s", strings.Join(args, " "), timeout, pr.Output())
	}
	return pr.Output(), code
}

// deleteTopic deletes a topic and waits until the broker no longer lists it
// (or lists a new topic of that name: decant may recreate it at once).
func (p *pipeline) deleteTopic(topic string) {
	p.T.Helper()
	ctx := context.Background()
	td, err := p.Kafka.Admin.ListTopics(ctx, topic)
	if err != nil || !td.Has(topic) {
		p.T.Fatalf("topic %s: %v %v", topic, td, err)
	}
	id := td[topic].ID
	res, err := p.Kafka.Admin.DeleteTopics(ctx, topic)
	if err == nil {
		_, err = res.On(topic, nil)
	}
	if err != nil {
		p.T.Fatalf("delete topic %s: %v", topic, err)
	}
	testenv.WaitFor(p.T, "topic "+topic+" to be deleted", 30*time.Second, func() (bool, error) {
		td, err := p.Kafka.Admin.ListTopics(ctx, topic)
		return err == nil && (!td.Has(topic) || td[topic].ID != id), err
	})
}

// committed returns the offsets group committed on topic, by partition.
func (p *pipeline) committed(group, topic string) map[int32]int64 {
	p.T.Helper()
	os, err := p.Kafka.Admin.FetchOffsets(context.Background(), group)
	if err != nil {
		p.T.Fatalf("offsets of group %s: %v", group, err)
	}
	out := map[int32]int64{}
	os.Each(func(o kadm.OffsetResponse) {
		if o.Topic == topic && o.Err == nil {
			out[o.Partition] = o.At
		}
	})
	return out
}

// alterTopic changes one topic config and waits until the broker reports it.
func (p *pipeline) alterTopic(topic string, c kadm.AlterConfig) {
	p.T.Helper()
	ctx := context.Background()
	res, err := p.Kafka.Admin.AlterTopicConfigs(ctx, []kadm.AlterConfig{c}, topic)
	if err == nil {
		_, err = res.On(topic, nil)
	}
	if err != nil {
		p.T.Fatalf("alter %s of %s: %v", c.Name, topic, err)
	}
	testenv.WaitFor(p.T, fmt.Sprintf("%s of %s to be applied", c.Name, topic), 30*time.Second, func() (bool, error) {
		rcs, err := p.Kafka.Admin.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return false, err
		}
		rc, err := rcs.On(topic, nil)
		if err != nil {
			return false, err
		}
		for _, v := range rc.Configs {
			if v.Key == c.Name {
				dynamic := v.Source.String() == "DYNAMIC_TOPIC_CONFIG"
				return dynamic == (c.Op == kadm.SetConfig) && (c.Value == nil || v.Value != nil && *v.Value == *c.Value), nil
			}
		}
		return false, nil
	})
}

// deadLetters decodes the records of <prefix>.dlq: key and value fields.
func (p *pipeline) deadLetters() []map[string]any {
	p.T.Helper()
	var out []map[string]any
	for _, r := range p.Kafka.Records(p.T, p.dlqTopic()) {
		var v map[string]any
		if err := json.Unmarshal(r.Value, &v); err != nil {
			p.T.Fatalf("dead letter %s is not JSON: %v", r.Value, err)
		}
		v["$key"] = string(r.Key)
		out = append(out, v)
	}
	return out
}

// insertItems inserts items from..to into category cat.
func insertItems(from, to, cat int) string {
	return fmt.Sprintf(`INSERT INTO items (id, name, category_id) SELECT g, 'item' || g, %d FROM generate_series(%d, %d) g`, cat, from, to)
}

// TestPublicationDropped: DROP PUBLICATION while `decant run` streams,
// then changes. PostgreSQL 15 cannot decode, through the slot, the
// changes committed while the publication was missing — recreating it
// does not help — so retrying is futile: decant must stop with a message
// that names the publication and the recovery, without confirming the
// slot past the undecodable changes. Following the message (drop the slot,
// start again: new publication, new snapshot) loses nothing: the changes
// made before the drop are in the raw topic as they happened, the later
// rows through the snapshot, and the documents equal the database.
//
// It needs the streamer to turn the walsender's `publication "…" does not
// exist` (SQLSTATE 42704, streamer/replicate.go, the *pgproto3.ErrorResponse
// case of the replication loop) into a permanent error whose message names
// the publication, says that retrying cannot help, and gives
// `SELECT pg_drop_replication_slot('<slot>');` and the new snapshot as the
// recovery. Without it, decant retries forever (recreating the
// publication, which does not help) and this test fails.
func TestPublicationDropped(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	run := p.start("run-1", "run")
	p.PG.Exec(t, insertItems(1, 3, 1))
	p.WaitConverged(90 * time.Second) // the slot exists: later changes are streamed
	p.PG.Exec(t, insertItems(4, 6, 1))
	p.WaitConverged(60 * time.Second)

	probe := p.newProbe()
	p.PG.Exec(t, `DROP PUBLICATION decant`)
	p.PG.Exec(t, insertItems(7, 9, 2))
	var msg string
	testenv.WaitFor(t, "decant to stop with a message naming the dropped publication and the recovery", 60*time.Second, func() (bool, error) {
		msg = regexp.MustCompile(`publication \\?"decant\\?" was dropped[^\n]*`).FindString(run.Output())
		return msg != "", nil
	})
	for _, want := range []string{"pg_drop_replication_slot('" + p.Slot + "')", "snapshot"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message does not say %q: %s", want, msg)
		}
	}
	if code := run.ExitCode(30 * time.Second); code != 1 {
		t.Fatalf("decant run: exit %d, want 1 (retrying cannot decode the changes); log:\n%s", code, run.Output())
	}
	commits := p.probeCommits(probe)
	if c := p.slotConfirmed(); len(commits) != 1 || c > commits[0] {
		t.Fatalf("slot confirmed at %s, past the commit of the changes it could not stream (%v)", wire.FormatLSN(c), commits)
	}
	if m := p.rawMissing(ids(4, 6), wire.OpCreate); len(m) > 0 {
		t.Fatalf("items inserted before the drop missing from the raw topic: %v", m)
	}

	// The recovery the message gives.
	p.waitSlotReleased()
	p.PG.Exec(t, `SELECT pg_drop_replication_slot($1)`, p.Slot)
	run = p.start("run-2", "run")
	p.WaitConverged(2 * time.Minute)
	p.waitRaw("the items inserted while the publication was missing, read by the new snapshot", ids(7, 9), wire.OpRead)
	if m := p.rawMissing(ids(4, 6), wire.OpCreate); len(m) > 0 {
		t.Fatalf("items inserted before the drop missing from the raw topic: %v", m)
	}
	stop(run)
}

// TestReplicaIdentityDefaultMidRun: the map stage needs the old
// category_id of updated and deleted items (to rebuild the category the
// item left). With REPLICA IDENTITY DEFAULT set while decant runs, the
// before images lack it: each such change goes to the dead-letter topic
// naming the table and the fix, is counted, and logged; the new parent is
// still rebuilt. decant then refuses to start until the fix is applied,
// and the fix it names (REPLICA IDENTITY FULL, then backfill) converges.
func TestReplicaIdentityDefaultMidRun(t *testing.T) {
	t.Parallel()
	p, run := newConverged(t)

	p.PG.Exec(t, `ALTER TABLE items REPLICA IDENTITY DEFAULT`)
	p.PG.Exec(t, `UPDATE items SET category_id = 2 WHERE id = 1`)
	p.PG.Exec(t, `DELETE FROM items WHERE id = 2`)
	fix := `ALTER TABLE "public"."items" REPLICA IDENTITY FULL; then decant backfill category`
	waitLog(t, run, `level=ERROR msg="changes without the before image the mappings need; written to the dead-letter topic"[^\n]*table=public.items`, 60*time.Second)
	if !strings.Contains(run.Output(), `fix="ALTER TABLE \"public\".\"items\" REPLICA IDENTITY FULL; then decant backfill category"`) {
		t.Errorf("the log line does not give the fix %q", fix)
	}
	var dead []map[string]any
	testenv.WaitFor(t, "two dead letters", 30*time.Second, func() (bool, error) {
		dead = p.deadLetters()
		return len(dead) >= 2, fmt.Errorf("%d dead letters", len(dead))
	})
	keys := map[string]string{}
	for _, d := range dead {
		if d["stage"] != "map" || d["table"] != "public.items" || !strings.Contains(fmt.Sprint(d["reason"]), fix) ||
			fmt.Sprint(d["missing"]) != "[category_id]" || fmt.Sprint(d["aggregates"]) != "[category]" {
			t.Errorf("dead letter %v", d)
		}
		keys[d["$key"].(string)] = fmt.Sprint(d["op"])
	}
	if len(dead) != 2 || keys[`{"id":1}`] != "u" || keys[`{"id":2}`] != "d" {
		t.Errorf("dead letters by key: %v, want the update of 1 and the delete of 2", keys)
	}
	if v, err := p.metric(`decant_resolver_map_dlq_total{table="public.items"}`); v != 2 {
		t.Errorf("decant_resolver_map_dlq_total = %v (%v), want 2", v, err)
	}
	// The after image still counts: the new category has the item.
	p.waitCategory2("category 2 to contain item 1", `"name":"item1"`, 30*time.Second)

	stop(run)
	out, code := p.decant(60*time.Second, "run")
	if code != 2 || !strings.Contains(out, `table public.items: updates and deletes do not carry [category_id] in their before image; fix: ALTER TABLE "public"."items" REPLICA IDENTITY FULL;`) {
		t.Fatalf("decant run with REPLICA IDENTITY DEFAULT: exit %d, want 2 naming the table and the fix:\n%s", code, out)
	}

	// The fix the messages give.
	p.PG.Exec(t, `ALTER TABLE items REPLICA IDENTITY FULL`)
	run = p.start("run-3", "run")
	p.backfill()
	p.WaitConverged(90 * time.Second)
	stop(run)
}

// TestRawTopicDeleted: a raw topic deleted while `decant run` streams into
// it. The streamer's records fail; the error names the topic; the slot is
// not confirmed past the unwritten changes; after a restart decant
// recreates the topic and streams every change committed since. Kafka
// refuses the records with UNKNOWN_TOPIC_OR_PARTITION, or with
// UNKNOWN_TOPIC_ID once the producer has refreshed its metadata (the
// streamer refreshes it at most every 100 ms, so either comes first).
func TestRawTopicDeleted(t *testing.T) {
	t.Parallel()
	p, run := deletedMidRun(t, (*pipeline).rawTopic, `level=WARN msg="stream session ended; restarting"[^\n]*produce to {topic}: UNKNOWN_TOPIC_(OR_PARTITION|ID)`)
	confirmed := p.slotConfirmed()

	stop(run)
	run = p.start("run-2", "run")
	p.WaitConverged(2 * time.Minute)
	p.waitRaw("the items inserted after the topic was deleted", ids(4, 6), wire.OpCreate)
	for id, commit := range p.commitLSNs(wire.OpCreate) {
		if confirmed > commit {
			t.Errorf("while the topic was missing, the slot was confirmed at %s, past the commit of item %d (%s)", wire.FormatLSN(confirmed), id, wire.FormatLSN(commit))
		}
	}
	stop(run)
}

// TestRefsTopicDeleted: the refs topic deleted while `decant run` runs.
// The map stage's produce and the build stage's fetch fail naming the
// topic; both sessions restart, recreate it, and every change committed
// since reaches Elasticsearch without a restart of the process.
func TestRefsTopicDeleted(t *testing.T) {
	t.Parallel()
	p, run := deletedMidRun(t, (*pipeline).refsTopic, `level=WARN msg="session ended; restarting from the last committed offsets" stage=map[^\n]*produce to {topic}: UNKNOWN_TOPIC`,
		`UPDATE items SET category_id = 2 WHERE id = 1`)
	p.WaitConverged(2 * time.Minute)
	stop(run)
}

// TestOversizedRawEvent: a row whose raw event is larger than Kafka
// accepts (2.5 MB of an unmapped text column; the limit is 1 MiB). Every
// PostgreSQL value can be encoded (malformed text falls back to a JSON
// string, see streamer/encode_test.go), so this is the row that cannot be
// written: it goes to the dead-letter topic with its key, topic, size and
// reason, is counted and logged, and the rows around it stream on. The
// documents it feeds are rebuilt by `decant backfill`.
func TestOversizedRawEvent(t *testing.T) {
	t.Parallel()
	p, run := newConverged(t)

	p.PG.Exec(t, `INSERT INTO items VALUES (4, 'huge', 1, (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 80000) g))`)
	p.PG.Exec(t, insertItems(5, 6, 2))
	waitLog(t, run, `level=ERROR msg="raw event refused by Kafka; written to the dead-letter topic"[^\n]*topic=`+regexp.QuoteMeta(p.rawTopic())+` err="MESSAGE_TOO_LARGE`, 60*time.Second)
	var dead []map[string]any
	testenv.WaitFor(t, "a dead letter", 30*time.Second, func() (bool, error) {
		dead = p.deadLetters()
		return len(dead) >= 1, nil
	})
	size, _ := dead[0]["value_bytes"].(float64)
	if d := dead[0]; len(dead) != 1 || d["$key"] != `{"id":4}` || d["stage"] != "stream" || d["topic"] != p.rawTopic() ||
		!strings.HasPrefix(fmt.Sprint(d["reason"]), "MESSAGE_TOO_LARGE") || size < 2_500_000 {
		t.Errorf("dead letters: %v", dead)
	}
	if v, err := p.metric("decant_streamer_dlq_total"); v != 1 {
		t.Errorf("decant_streamer_dlq_total = %v (%v), want 1", v, err)
	}
	// The rest streamed on: category 2 gets items 5 and 6.
	p.waitCategory2("category 2 to contain items 5 and 6", `"name":"item6"`, 60*time.Second)
	p.waitRaw("the items after the oversized one", ids(5, 6), wire.OpCreate)
	p.backfill()
	p.WaitConverged(90 * time.Second)
	stop(run)
}

// TestRefsTopicRefusesWrites simulates a full disk on the refs path: the
// broker refuses every write to the refs topic (max.message.bytes shrunk
// below one ref). The map stage fails its batch naming the topic, commits
// no offset past it, retries with backoff, and converges once the limit is
// lifted.
func TestRefsTopicRefusesWrites(t *testing.T) {
	t.Parallel()
	p, run := newConverged(t)
	group := p.Kafka.Prefix + ".map"
	// Documents converge as soon as one build reads the three items, which
	// can be before the map stage committed the last of their raw records:
	// wait for that commit, or it lands after `before` below.
	testenv.WaitFor(t, "the map stage to commit every raw record", 60*time.Second, func() (bool, error) {
		lag, err := testenv.GroupLag(context.Background(), p.Kafka.Admin, group, p.rawTopic())
		return err == nil && lag == 0, fmt.Errorf("lag %d: %v", lag, err)
	})

	tiny := "64"
	p.alterTopic(p.refsTopic(), kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &tiny})
	before := p.committed(group, p.rawTopic())
	p.PG.Exec(t, insertItems(4, 6, 2))
	waitLog(t, run, `level=WARN msg="session ended; restarting from the last committed offsets" stage=map[^\n]*produce to `+regexp.QuoteMeta(p.refsTopic())+`: MESSAGE_TOO_LARGE`, 60*time.Second)
	waitLog(t, run, `(?s)(session ended; restarting from the last committed offsets" stage=map[^\n]*MESSAGE_TOO_LARGE.*){2}`, 60*time.Second)
	if after := p.committed(group, p.rawTopic()); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("the map stage committed raw offsets %v → %v while its refs were refused", before, after)
	}
	if docs, err := p.ESDocs(); err != nil || strings.Contains(docs["2"], "item4") {
		t.Fatalf("category 2 was built from refs the broker refused: %v %v", docs["2"], err)
	}

	p.alterTopic(p.refsTopic(), kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "max.message.bytes"})
	p.WaitConverged(2 * time.Minute)
	stop(run)
}

// proxy forwards TCP connections to a server; cut makes the server
// unreachable for the clients behind it (open connections reset, new ones
// refused) without touching the server, which other tests share.
type proxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

func newProxy(t *testing.T, target string) *proxy {
	x := &proxy{t: t, target: target, addr: testenv.FreePort(t), conns: map[net.Conn]bool{}}
	x.restore()
	t.Cleanup(x.cut)
	return x
}

// restore listens again on the same address.
func (x *proxy) restore() {
	x.t.Helper()
	ln, err := net.Listen("tcp", x.addr)
	if err != nil {
		x.t.Fatalf("proxy for %s: %v", x.target, err)
	}
	x.mu.Lock()
	x.ln = ln
	x.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go x.forward(c)
		}
	}()
}

func (x *proxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", x.target)
	if err != nil {
		c.Close()
		return
	}
	x.mu.Lock()
	if x.ln == nil { // cut meanwhile
		x.mu.Unlock()
		c.Close()
		s.Close()
		return
	}
	x.conns[c], x.conns[s] = true, true
	x.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); s.Close(); c.Close() }()
	_, _ = io.Copy(c, s)
	c.Close()
	s.Close()
}

// cut closes the listener and every forwarded connection.
func (x *proxy) cut() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.ln != nil {
		x.ln.Close()
		x.ln = nil
	}
	for c := range x.conns {
		c.Close()
		delete(x.conns, c)
	}
}

// TestSlotHeldByAnotherProcess: another client streams from decant's slot
// when `decant run` starts. decant stands by, saying so, and takes over
// when the slot is released: the changes committed meanwhile are streamed.
func TestSlotHeldByAnotherProcess(t *testing.T) {
	t.Parallel()
	p, run := newConverged(t)
	stop(run)
	p.waitSlotReleased()

	ctx := testenv.Ctx(t)
	holder, err := pgconn.Connect(ctx, p.PG.DSN+"&replication=database&application_name=other")
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if err := pglogrepl.StartReplication(ctx, holder, p.Slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'decant'"}}); err != nil {
		t.Fatalf("another client takes the slot: %v", err)
	}
	run = p.start("run-2", "run")
	waitLog(t, run, `level=INFO msg="slot is held by another streamer; standing by to take over" stage=stream slot=`+p.Slot, 60*time.Second)
	p.PG.Exec(t, insertItems(4, 6, 2))
	time.Sleep(2 * time.Second)
	if m := p.rawMissing(ids(4, 6), wire.OpCreate); len(m) != 3 {
		t.Fatalf("a standby streamed while another client held the slot")
	}
	holder.Close(context.Background())
	p.waitRaw("the items inserted while the slot was held", ids(4, 6), wire.OpCreate)
	p.WaitConverged(90 * time.Second)
	stop(run)
}

// TestServersUnreachableMidRun: Elasticsearch, then PostgreSQL, become
// unreachable from a running `decant run` (through proxies cut by the
// test; the shared servers keep running). Each outage is logged as a
// warning naming what failed, the stages retry, and once the server is
// back every change committed during the outage reaches Elasticsearch.
// (Kafka cannot be cut this way — clients reach the broker at the
// address it advertises — and the shared broker must not be stopped:
// e2e/chaos TestChaos restarts it.)
func TestServersUnreachableMidRun(t *testing.T) {
	t.Parallel()
	pgURL, err := url.Parse(testenv.PGAdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	esURL, err := url.Parse(testenv.ESURL())
	if err != nil {
		t.Fatal(err)
	}
	pgProxy, esProxy := newProxy(t, pgURL.Host), newProxy(t, esURL.Host)
	p := newPipelineVia(t, pgProxy.addr, esProxy.addr)
	run := p.start("run-1", "run")
	p.PG.Exec(t, insertItems(1, 3, 1))
	p.WaitConverged(90 * time.Second)

	esProxy.cut()
	p.PG.Exec(t, insertItems(4, 6, 2))
	waitLog(t, run, `level=WARN msg="(elasticsearch refused documents for now; retrying|session ended; restarting from the last committed offsets" stage=build)[^\n]*`+regexp.QuoteMeta(esProxy.addr), 60*time.Second)
	esProxy.restore()
	p.WaitConverged(90 * time.Second)

	pgProxy.cut()
	p.PG.Exec(t, insertItems(7, 9, 2))
	waitLog(t, run, `level=WARN msg="stream session ended; restarting"[^\n]*`+regexp.QuoteMeta(pgProxy.addr)+`[^\n]*connection refused`, 60*time.Second)
	pgProxy.restore()
	p.WaitConverged(2 * time.Minute)
	stop(run)
}

// TestSchemaChangeBreaksMapping: a mapped column dropped, then a join
// column retyped, while `decant run` runs. Each time the build stage stops
// (no retry can fix it) with an error naming the aggregate, PostgreSQL's
// message, the mapping problem at file:line:column and the fix, /readyz
// answers 503 saying why, and the stream stage goes on. After the fix and
// a restart, the changes made meanwhile are built: nothing was lost.
func TestSchemaChangeBreaksMapping(t *testing.T) {
	t.Parallel()
	p, run := newConverged(t)
	for i, c := range []struct {
		name, brk, pgMessage, problem, fix string
	}{
		{"drop", `ALTER TABLE items DROP COLUMN name`, `column [a-z0-9_.]*name does not exist`, `column \\"name\\" does not exist in table public.items`,
			`ALTER TABLE items ADD COLUMN name text; UPDATE items SET name = 'item' || id`},
		{"retype", `ALTER TABLE items DROP CONSTRAINT items_category_id_fkey; ALTER TABLE items ALTER COLUMN category_id TYPE text`, `operator does not exist`, `category_id`,
			`ALTER TABLE items ALTER COLUMN category_id TYPE int USING category_id::int`},
	} {
		p.PG.Exec(t, c.brk)
		title := fmt.Sprintf("title after %s", c.name)
		p.PG.Exec(t, fmt.Sprintf(`UPDATE categories SET title = '%s' WHERE id = 1`, title))
		line := waitLog(t, run, `level=ERROR msg="stage stopped: the mappings no longer match the database" stage=build aggregate=category[^\n]*`, 90*time.Second)
		for _, want := range []string{c.pgMessage, `problems="[^\n]*\.yaml:\d+:\d+: [^\n]*` + c.problem, `fix="run .decant check.`, `decant backfill --reindex category`} {
			if !regexp.MustCompile(want).MatchString(line) {
				t.Errorf("%s: the log line does not match %q:\n%s", c.name, want, line)
			}
		}
		code, body, err := testenv.Get("http://" + p.HTTP + "/readyz")
		if code != 503 || !strings.Contains(body, `"build":false`) || !strings.Contains(body, `"stopped"`) || !strings.Contains(body, "decant check") {
			t.Errorf("%s: /readyz = %d %s (%v), want 503 saying the build stage stopped and the fix", c.name, code, body, err)
		}
		// The stream stage goes on.
		p.PG.Exec(t, fmt.Sprintf(`INSERT INTO items (id, category_id) VALUES (%d, '2')`, 10+i))
		p.waitRaw("the item inserted while the build stage is stopped", []int{10 + i}, wire.OpCreate)

		p.PG.Exec(t, c.fix)
		stop(run)
		run = p.start("run-after-"+c.name, "run")
		p.WaitConverged(90 * time.Second)
		if docs, err := p.ESDocs(); err != nil || !strings.Contains(docs["1"], title) {
			t.Fatalf("%s: category 1 after the fix: %s (%v), want %q", c.name, docs["1"], err, title)
		}
	}
	stop(run)
}
