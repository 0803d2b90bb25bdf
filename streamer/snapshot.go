package streamer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// tableColumns reads a table's live columns in attnum order, which of them
// are generated, and its primary key from the catalog.
func tableColumns(ctx context.Context, db querier, relid uint32) (cols []pglogrepl.RelationMessageColumn, pk []string, generated map[string]bool, err error) {
	rows, err := db.Query(ctx, `
SELECT a.attname, a.atttypid, a.attgenerated <> '',
       coalesce(array_position(i.indkey::int2[], a.attnum) - array_lower(i.indkey::int2[], 1) + 1, 0)
FROM pg_attribute a
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`, relid)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("read columns of relation %d: %w", relid, err)
	}
	defer rows.Close()
	type pkc struct {
		name string
		pos  int
	}
	var pks []pkc
	for rows.Next() {
		var name string
		var typ uint32
		var gen bool
		var pos int
		if err := rows.Scan(&name, &typ, &gen, &pos); err != nil {
			return nil, nil, nil, err
		}
		if gen {
			if generated == nil {
				generated = map[string]bool{}
			}
			generated[name] = true
		}
		cols = append(cols, pglogrepl.RelationMessageColumn{Name: name, DataType: typ})
		if pos > 0 {
			pks = append(pks, pkc{name, pos})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, nil, err
	}
	for p := 1; len(pk) < len(pks); p++ {
		for _, c := range pks {
			if c.pos == p {
				pk = append(pk, c.name)
			}
		}
	}
	return cols, pk, generated, nil
}

// publishedColumns splits a table's columns (tableColumns) into those
// pgoutput sends, in attnum order as in its relation messages, and the
// names of the others. published is the table's pg_publication_tables.attnames
// (PostgreSQL 15+, nil before), which leaves out the columns outside a
// publication's column list. Generated columns are never sent before 18
// (where 15 still lists them in attnames); from 18 on attnames lists
// exactly the stored generated columns a publication publishes
// (publish_generated_columns = stored, or named in its column list), so
// gen18 (a server of 18+) trusts it for them.
func publishedColumns(cols []pglogrepl.RelationMessageColumn, generated map[string]bool, published []string, gen18 bool) (keep []pglogrepl.RelationMessageColumn, drop []string) {
	var listed map[string]bool
	if published != nil {
		listed = make(map[string]bool, len(published))
		for _, n := range published {
			listed[n] = true
		}
	}
	for _, c := range cols {
		if (listed == nil || listed[c.Name]) && (!generated[c.Name] || gen18 && listed != nil) {
			keep = append(keep, c)
		} else {
			drop = append(drop, c.Name)
		}
	}
	return keep, drop
}

// loadRelation turns a pgoutput relation message into a relation: primary
// key from the catalog, column types loaded, topic created.
func (s *Streamer) loadRelation(ctx context.Context, pool *pgxpool.Pool, m *pglogrepl.RelationMessage) (*relation, error) {
	_, pk, _, err := tableColumns(ctx, pool, m.RelationID)
	if err != nil {
		return nil, err
	}
	oids := make([]uint32, len(m.Columns))
	for i, c := range m.Columns {
		oids[i] = c.DataType
	}
	if err := s.types.load(ctx, pool, oids...); err != nil {
		return nil, fmt.Errorf("table %s.%s: load column types: %w", m.Namespace, m.RelationName, err)
	}
	r, err := newRelation(m, pk, s.cfg.TopicPrefix)
	if err != nil {
		return nil, permanent(err)
	}
	if err := s.ensureTopic(ctx, r.topic, int32(s.cfg.Partitions), wire.RawTopicConfigs()); err != nil {
		return nil, err
	}
	return r, nil
}

// snapshot emits every row of every published table as op "r", read
// inside the slot's exported snapshot, so that streaming from the slot's
// consistent point continues exactly where the snapshot ends. Rows stream
// through pgx and the bounded producer: memory does not grow with the table.
func (s *Streamer) snapshot(ctx context.Context, pool *pgxpool.Pool, snapshotName string, cp uint64) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshotName)); err != nil {
		return fmt.Errorf("use exported snapshot %s: %w", snapshotName, err)
	}
	type tbl struct {
		oid           uint32
		schema, table string
		pages         int64
		rowsPerPage   float64
		published     []string // pg_publication_tables.attnames; nil before 15
		gen18         bool     // the server publishes generated columns on request (18+)
	}
	// attnames (15+) is read through to_jsonb so that the query also runs
	// on 13 and 14, which do not have it.
	rows, err := tx.Query(ctx, `
SELECT c.oid, n.nspname, c.relname, pg_relation_size(c.oid) / current_setting('block_size')::int8,
       CASE WHEN c.relpages > 0 AND c.reltuples > 0 THEN c.reltuples / c.relpages ELSE 50 END,
       (to_jsonb(pt) -> 'attnames')::text, current_setting('server_version_num')::int >= 180000
FROM pg_publication_tables pt
JOIN pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
WHERE pt.pubname = $1 ORDER BY 2, 3`, s.cfg.Publication)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tbl, error) {
		var t tbl
		var attnames *string
		if err := r.Scan(&t.oid, &t.schema, &t.table, &t.pages, &t.rowsPerPage, &attnames, &t.gen18); err != nil {
			return t, err
		}
		if attnames != nil && *attnames != "null" {
			if err := json.Unmarshal([]byte(*attnames), &t.published); err != nil {
				return t, fmt.Errorf("columns of %s.%s: %w", t.schema, t.table, err)
			}
		}
		return t, nil
	})
	if err != nil {
		return fmt.Errorf("list published tables: %w", err)
	}
	prog := newProgress(cp)
	mark := prog.open()
	enc := &encoder{types: s.types, redact: s.redact}
	started := time.Now()
	var total int64
	prior := map[string]map[int32]int64{} // topic → partitions holding an earlier image (see sweep)
	for _, t := range tables {
		all, pk, generated, err := tableColumns(ctx, tx, t.oid)
		if err != nil {
			return err
		}
		cols, _ := publishedColumns(all, generated, t.published, t.gen18)
		rm := &pglogrepl.RelationMessage{RelationID: t.oid, Namespace: t.schema, RelationName: t.table, Columns: make([]*pglogrepl.RelationMessageColumn, len(cols))}
		for i := range cols {
			rm.Columns[i] = &cols[i]
		}
		r, err := newRelation(rm, pk, s.cfg.TopicPrefix)
		if err != nil {
			return permanent(err)
		}
		oids := make([]uint32, len(cols))
		for i, c := range cols {
			oids[i] = c.DataType
		}
		if err := s.types.load(ctx, tx, oids...); err != nil {
			return fmt.Errorf("table %s.%s: load column types: %w", t.schema, t.table, err)
		}
		if err := s.ensureTopic(ctx, r.topic, int32(s.cfg.Partitions), wire.RawTopicConfigs()); err != nil {
			return err
		}
		if p, err := s.priorEnds(ctx, r.topic); err != nil {
			return err
		} else if len(p) > 0 {
			prior[r.topic] = p
		}
		n, err := s.snapshotTable(ctx, tx, enc, r, t.pages, t.rowsPerPage, cp, mark)
		if err != nil {
			return fmt.Errorf("table %s.%s: %w", t.schema, t.table, err)
		}
		total += n
		s.log.Info("snapshot of table read", "table", t.schema+"."+t.table, "rows", n)
	}
	if err := s.kafka.Flush(ctx); err != nil {
		return err
	}
	if err := s.fatalErr(); err != nil {
		return err
	}
	for topic, p := range prior {
		n, err := s.sweep(ctx, topic, p, mark, cp)
		if err != nil {
			return err
		}
		if err := s.kafka.Flush(ctx); err != nil {
			return err
		}
		if err := s.fatalErr(); err != nil {
			return err
		}
		s.log.Info("snapshot sweep: tombstoned the rows of an earlier image that no longer exist", "topic", topic, "keys", n)
	}
	s.log.Info("initial snapshot complete", "tables", len(tables), "rows", total, "took", time.Since(started).Round(time.Millisecond))
	return nil
}

func (s *Streamer) snapshotTable(ctx context.Context, tx pgx.Tx, enc *encoder, r *relation, pages int64, rowsPerPage float64, cp uint64, mark *txnMark) (int64, error) {
	base := "SELECT " + snapshotSelect(r) + " FROM " + pgx.Identifier{r.schema, r.table}.Sanitize() + " t"
	chunk := max(int64(float64(s.cfg.SnapshotChunkRows)/max(rowsPerPage, 1)), 1)
	at := txnInfo{lsn: cp, commitLSN: cp, commitTime: time.Now(), snapshot: true}
	var n int64
	lastLog := time.Now()
	for lo := int64(0); ; lo += chunk {
		chunkStart := n
		sql := base + fmt.Sprintf(" WHERE t.ctid >= '(%d,0)'::tid", lo)
		last := lo+chunk > pages
		if !last {
			sql += fmt.Sprintf(" AND t.ctid < '(%d,0)'::tid", lo+chunk)
		}
		rows, err := tx.Query(ctx, sql, pgx.QueryResultFormats{pgx.TextFormatCode})
		if err != nil {
			return n, err
		}
		for rows.Next() {
			key, row, err := enc.snapshotValues(enc.after[:0], r, rows.RawValues())
			if err != nil {
				rows.Close()
				return n, permanent(err)
			}
			enc.after = row
			rec := enc.snapshotRow(r, key, row, &at)
			s.produce(ctx, rec, mark, cp)
			n++
			if err := s.fatalErr(); err != nil {
				rows.Close()
				return n, err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return n, err
		}
		s.met.snapshotRows.Add(float64(n - chunkStart))
		if time.Since(lastLog) > 10*time.Second {
			s.log.Info("snapshot progress", "table", r.schema+"."+r.table, "rows", n, "page", lo, "pages", pages)
			lastLog = time.Now()
		}
		if last {
			return n, nil
		}
	}
}

// The snapshot marker lives in the compacted topic <prefix>.state under the
// key snapshot/<slot>: "started" when the slot is created, "done" once every
// snapshot row is acknowledged. A slot found on start-up whose marker is not
// "done" was interrupted mid-snapshot; it is dropped and the snapshot redone,
// so a crash never leaves a gap.
// The marker's format is wire.SnapshotMarker.
func (s *Streamer) stateTopic() string { return wire.StateTopic(s.cfg.TopicPrefix) }

func (s *Streamer) markSnapshot(ctx context.Context, done bool, cp uint64) error {
	if err := s.ensureTopic(ctx, s.stateTopic(), 1, wire.StateTopicConfigs()); err != nil {
		return err
	}
	v, _ := json.Marshal(wire.SnapshotMarker{Slot: s.cfg.Slot, ConsistentLSN: wire.FormatLSN(cp), Done: done, Time: time.Now().UTC().Format(time.RFC3339Nano)})
	rec := &kgo.Record{Topic: s.stateTopic(), Key: []byte(wire.SnapshotKey(s.cfg.Slot)), Value: v}
	if err := s.kafka.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("write snapshot marker to %s: %w", s.stateTopic(), err)
	}
	return nil
}

// snapshotDone reads the latest snapshot marker of the slot.
func (s *Streamer) snapshotDone(ctx context.Context) (bool, error) {
	ends, err := s.admin.ListEndOffsets(ctx, s.stateTopic())
	if err != nil {
		return false, fmt.Errorf("read %s: %w", s.stateTopic(), err)
	}
	end, ok := ends.Lookup(s.stateTopic(), 0)
	if !ok || end.Err != nil || end.Offset == 0 {
		return false, nil // no marker: the slot predates decant's bookkeeping or the topic was lost
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, s.cfg.Kafka...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.stateTopic(): {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	key := wire.SnapshotKey(s.cfg.Slot)
	done := false
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		fs := cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return false, fmt.Errorf("read %s: %w", s.stateTopic(), err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return false, ferr
		}
		var last int64 = -1
		fs.EachRecord(func(r *kgo.Record) {
			last = r.Offset
			if string(r.Key) == key {
				var m wire.SnapshotMarker
				if json.Unmarshal(r.Value, &m) == nil {
					done = m.Done
				}
			}
		})
		if last >= end.Offset-1 {
			return done, nil
		}
		if errors.Is(ctx.Err(), context.Canceled) {
			return false, ctx.Err()
		}
	}
}
