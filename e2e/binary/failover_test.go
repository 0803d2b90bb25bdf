package binary

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/wire"
)

// TestFailoverContinuesOnPromotedStandby is acceptance 3 of issue 16
// (PostgreSQL 17+): `decant run`, with a postgres.dsn listing a primary and
// its standby (target_session_attrs=primary), streams from a failover slot
// while a workload writes; the standby holds a synchronized copy of the
// slot; the primary is killed with SIGKILL and the standby promoted, and
// the workload goes on against the promoted server. decant must continue
// there from the synchronized slot: no new slot and no new snapshot, every
// change committed on the promoted server in the raw topics (each
// transaction also inserts a row into events, whose raw topic must list
// exactly the table's rows), no change out of order per key, and
// Elasticsearch equal to the oracle. Changes the old primary committed but
// never sent to the standby are lost by PostgreSQL itself; with
// synchronized_standby_slots decant never received them either, which the
// events comparison checks too (no extra row).
func TestFailoverContinuesOnPromotedStandby(t *testing.T) {
	failover(t, false)
}

// TestFailoverReachesStandbyFirst is the same failover with a
// postgres.dsn without target_session_attrs, and the promotion 5 s after
// the kill: decant's stages reach the standby while it is still one. The
// streamer finds the slot's synchronized copy there, which it can neither
// use nor drop: it must wait, and continue from the copy once the standby
// is promoted.
func TestFailoverReachesStandbyFirst(t *testing.T) {
	failover(t, true)
}

// failover runs the failover tests; standbyFirst gives decant a DSN
// without target_session_attrs and promotes 5 s after the kill.
func failover(t *testing.T, standbyFirst bool) {
	pair := testenv.Failover(t)
	spec := items
	spec.PGAdmin, spec.HTTP = pair.Admin, true
	spec.Schema += `
CREATE TABLE events (seq bigint PRIMARY KEY, item int NOT NULL, op text NOT NULL);
CREATE PUBLICATION decant FOR ALL TABLES;
INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 2000) g;`
	p := testenv.NewPipeline(t, spec)
	ctx := testenv.Ctx(t)

	var env []string
	if standbyFirst {
		env = []string{"DECANT_POSTGRES_DSN=" + strings.Replace(p.PG.DSN, "&target_session_attrs=primary", "", 1)}
	}
	run := p.Start("run", env, "run")
	p.WaitConverged(2 * time.Minute) // the initial snapshot is done

	// The workload: one transaction at a time, each an item upsert or
	// delete and its events row. Errors while the primary is gone are
	// expected; the pool reaches the promoted server afterwards.
	var seq, committed, failed, afterPromotion atomic.Int64
	var promoted atomic.Bool
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		rng := rand.New(rand.NewPCG(16, 17))
		for {
			select {
			case <-stop:
				return
			default:
			}
			id, n := 1+rng.IntN(2500), seq.Add(1)
			var err error
			if rng.IntN(5) == 0 {
				_, err = p.PG.Pool.Exec(ctx, `WITH d AS (DELETE FROM items WHERE id = $1) INSERT INTO events VALUES ($2, $1, 'd')`, id, n)
			} else {
				_, err = p.PG.Pool.Exec(ctx, `WITH u AS (INSERT INTO items VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET name = excluded.name, category_id = excluded.category_id)
INSERT INTO events VALUES ($4, $1, 'u')`, id, fmt.Sprintf("v%d", n), 1+rng.IntN(2), n)
			}
			if err != nil {
				failed.Add(1)
				time.Sleep(50 * time.Millisecond)
				continue
			}
			committed.Add(1)
			if promoted.Load() {
				afterPromotion.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()

	// The slot is a failover slot, and its copy on the standby has
	// caught up with a position the workload reached; the workload then
	// goes on, so decant holds changes past the copy when the primary dies.
	testenv.WaitFor(t, "some committed transactions", time.Minute, func() (bool, error) { return committed.Load() >= 300, nil })
	pair.WaitSlotSynced(t, p.Slot, 2*time.Minute)
	time.Sleep(2 * time.Second)
	lastLSN := pair.KillPrimary(t)
	killedAt := time.Now()
	beforeKill := committed.Load()
	if standbyFirst {
		time.Sleep(5 * time.Second)
	}
	pair.Promote(t)
	promoted.Store(true)
	t.Logf("primary killed at %s after %d transactions; standby promoted in %s", lastLSN, beforeKill, time.Since(killedAt).Round(time.Millisecond))
	testenv.WaitFor(t, "transactions committed on the promoted server", 2*time.Minute, func() (bool, error) { return afterPromotion.Load() >= 1000, nil })
	close(stop)
	<-done

	// Every change is in Kafka once the slot on the promoted server has
	// confirmed its last LSN.
	var end string
	if err := p.PG.Pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&end); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the promoted server's slot "+p.Slot+" to confirm "+end, 2*time.Minute, func() (bool, error) {
		var ok bool
		err := p.PG.Pool.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1`, p.Slot, end).Scan(&ok)
		return ok, err
	})
	p.WaitConverged(3 * time.Minute)
	if run.Exited() {
		t.Fatalf("decant run exited during the failover: %v", run.Err())
	}
	// Read-your-writes on the promoted server: the watermarks follow it.
	p.PG.Exec(t, `INSERT INTO items VALUES (99999, 'after the failover', 1)`)
	if err := opsapi.NewClient("http://"+p.HTTP).Wait(ctx, lsn(t, p), time.Minute); err != nil {
		t.Fatalf("/v1/wait for a write on the promoted server: %v", err)
	}
	if docs, err := p.ESDocs(); err != nil || !strings.Contains(docs["99999"], "after the failover") {
		t.Fatalf("a write on the promoted server not searchable after /v1/wait: %q %v", docs["99999"], err)
	}

	var problems []string
	// events: exactly the rows of the promoted server's table.
	eventRecs := p.Kafka.Records(t, wire.RawTopic(p.Kafka.Prefix, "public", "events"))
	inTopic := map[string]bool{}
	for _, r := range eventRecs {
		if c := change(t, r.Value); c != nil && c.Op == wire.OpCreate {
			inTopic[testenv.Canonical(c.Key)] = true
		}
	}
	inTable := canonicalKeys(testenv.Oracle(t, p.PG.Pool, `SELECT jsonb_build_object('seq', seq)::text, '{}'::json FROM events`))
	for k := range inTable {
		if !inTopic[k] {
			problems = append(problems, "events row committed on the promoted server missing from the raw topic: "+k)
		}
	}
	for k := range inTopic {
		if _, ok := inTable[k]; !ok {
			problems = append(problems, "events row in the raw topic that the promoted server does not have: "+k)
		}
	}

	// items: no new snapshot (the snapshot's 2000 rows once), no change
	// out of order per key (records again after the failover repeat
	// positions already sent), and the last record per key is the row.
	itemRecs := p.Kafka.Records(t, wire.RawTopic(p.Kafka.Prefix, "public", "items"))
	type pos struct {
		lsn uint64
		seq int64
	}
	seen := map[string]map[pos]bool{}
	maxPos := map[string]pos{}
	last := map[string]string{}
	reads, dups := 0, 0
	for _, r := range itemRecs {
		key := string(r.Key)
		if r.Value == nil {
			delete(last, key)
			continue
		}
		c := change(t, r.Value)
		if c.Op == wire.OpRead {
			reads++
		}
		l, err := wire.ParseLSN(c.Source.CommitLSN)
		if err != nil {
			t.Fatalf("items record at offset %d: commit_lsn %q: %v", r.Offset, c.Source.CommitLSN, err)
		}
		at, m := pos{l, c.Source.Seq}, maxPos[key]
		switch {
		case seen[key][at]:
			dups++
		case at.lsn < m.lsn || at.lsn == m.lsn && at.seq < m.seq:
			problems = append(problems, fmt.Sprintf("items %s: change at %s/%d after one at %s/%d (out of order)", key, c.Source.CommitLSN, at.seq, wire.FormatLSN(m.lsn), m.seq))
		}
		if seen[key] == nil {
			seen[key] = map[pos]bool{}
		}
		seen[key][at] = true
		if at.lsn > m.lsn || at.lsn == m.lsn && at.seq > m.seq {
			maxPos[key] = at
		}
		if c.Op == wire.OpDelete {
			delete(last, key)
		} else {
			last[key] = testenv.Canonical(c.After)
		}
	}
	if reads != 2000 {
		problems = append(problems, fmt.Sprintf("items: %d snapshot rows (op r), want the 2000 of the one initial snapshot", reads))
	}
	rows := canonicalKeys(testenv.Oracle(t, p.PG.Pool, `SELECT jsonb_build_object('id', id)::text, to_jsonb(i) FROM items i`))
	for _, m := range testenv.Mismatches(rows, canonicalKeys(last)) {
		problems = append(problems, "items raw topic versus table: "+m)
	}
	out := run.Output()
	if n := strings.Count(out, "created replication slot"); n != 1 {
		problems = append(problems, fmt.Sprintf("decant created the slot %d times, want once", n))
	}
	if !strings.Contains(out, "resuming a slot synchronized from the former primary") {
		problems = append(problems, "decant did not log that it resumed the synchronized slot")
	}
	if standbyFirst && !strings.Contains(out, "is a copy synchronized from the primary and this server is still a standby") {
		problems = append(problems, "decant did not meet the slot's copy on the standby before its promotion")
	}
	for _, pr := range problems {
		t.Error(pr)
	}
	// What each stage said about the failover (reconnections, retries).
	var said []string
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "synchronized") {
			said = append(said, line)
		}
	}
	t.Logf("decant's warnings, errors and slot lines (%d):\n%s", len(said), strings.Join(said[:min(len(said), 30)], "\n"))
	t.Logf("transactions: %d committed (%d before the kill, %d on the promoted server), %d failed during the failover; events rows %d; items records %d (%d repeated after the failover)",
		committed.Load(), beforeKill, afterPromotion.Load(), failed.Load(), len(inTable), len(itemRecs), dups)
}

// change decodes a raw record's value; nil for a tombstone.
func change(t *testing.T, v []byte) *wire.Change {
	t.Helper()
	if v == nil {
		return nil
	}
	var c wire.Change
	if err := json.Unmarshal(v, &c); err != nil {
		t.Fatalf("raw record %s: %v", v, err)
	}
	return &c
}

// canonicalKeys re-encodes the keys of m canonically, like Oracle's.
func canonicalKeys(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[testenv.Canonical([]byte(k))] = v
	}
	return out
}
