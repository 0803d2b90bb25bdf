package streamer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/wire"
)

// Online snapshots of one table (DESIGN.md, "Online table snapshots"):
// a table a mapping starts using, or one `decant snapshot` names, is read
// in primary-key chunks while every other table keeps streaming. Around
// each chunk's read the runner writes a low and a high watermark, logical
// messages with prefix "decant" in transactions of their own. The
// replication loop, between a chunk's two watermarks, notes every key of
// the table that a streamed change touched; at the high watermark it
// drops those keys from the chunk and produces the rest as op "r" rows,
// after every change before the high watermark and before every change
// after it. A chunk whose read could have missed a transaction committed
// before its low watermark (one not yet visible to the read) is read
// again. Progress (the last key of each chunk Kafka acknowledged) is in
// <prefix>.state (wire.TableSnapshot), so a restart resumes after it.

// watermarkPrefix is the prefix of the watermark messages.
const watermarkPrefix = "decant"

// watermark is the content of a watermark message.
type watermark struct {
	Job   string `json:"job"` // the job's token: watermarks of an earlier process never match
	Chunk int    `json:"chunk"`
	Mark  string `json:"mark"` // "low" or "high"
}

// afterChunkRead, when set (by tests), runs between a chunk's read and its
// high watermark: changes then are those the chunk must drop.
var afterChunkRead func()

// tableJob is the online snapshot of one table in progress. The runner
// goroutine hands chunks over through mu; the rest is the replication
// loop's alone.
type tableJob struct {
	rel    *relation
	token  string
	id     uint64 // the LSN the snapshot started at: its rows' source.lsn
	result chan chunkResult

	mu    sync.Mutex
	chunk *chunk // read, waiting for its high watermark

	// The replication loop's state.
	open      int               // the chunk whose window is open, or -1
	lowLSN    uint64            // commit LSN of the open chunk's low watermark
	touched   map[string]bool   // keys changed in the open window
	truncated bool              // the table was truncated in the open window
	history   map[uint32]uint64 // xid → commit LSN of the transactions streamed since the job began
}

// chunk is one read of the table: keys and rows in key order, and the
// transactions in progress for the read's snapshot.
type chunk struct {
	n          int
	keys, rows [][]byte
	xmin       uint32
	xip        []uint32
}

// chunkResult is the loop's answer at a chunk's high watermark: the rows
// it produced (mark counts their acknowledgements), or, with mark nil,
// why the chunk must be read again.
type chunkResult struct {
	mark    *txnMark
	emitted int
	retry   string
}

// touch notes a record the loop produces for the job's table while a
// window is open. Called on the replication loop only.
func (j *tableJob) touch(key []byte) {
	if bytes.Equal(key, wire.TruncateKey) {
		j.truncated = true
		return
	}
	j.touched[string(key)] = true
}

// committed notes a transaction streamed while the job runs.
func (j *tableJob) committed(xid uint32, commitLSN uint64) {
	if xid != 0 {
		j.history[xid] = commitLSN
	}
}

// watermark handles a logical message on the replication loop: the low
// watermark of the job's next chunk opens its window, the high watermark
// closes it and produces the chunk.
func (st *streamState) watermark(ctx context.Context, m *pglogrepl.LogicalDecodingMessageV2) {
	j := st.s.job.Load()
	if j == nil || m.Prefix != watermarkPrefix || !m.Transactional || st.cur == nil {
		return
	}
	var w watermark
	if json.Unmarshal(m.Content, &w) != nil || w.Job != j.token {
		return
	}
	switch w.Mark {
	case "low":
		j.open, j.lowLSN, j.truncated = w.Chunk, st.at.commitLSN, false
		clear(j.touched)
	case "high":
		j.mu.Lock()
		c := j.chunk
		j.chunk = nil
		j.mu.Unlock()
		var res chunkResult
		open := j.open
		j.open = -1 // the chunk's own rows are not changes
		if open != w.Chunk || c == nil || c.n != w.Chunk {
			res.retry = "its low watermark or its rows were not seen"
		} else {
			res = st.emitChunk(ctx, j, c)
		}
		select {
		case j.result <- res:
		default:
		}
	}
}

// emitChunk produces the rows of c that no change between the chunk's
// watermarks touched, as read at the high watermark of the transaction
// st.at, unless a transaction committed before the low watermark was
// still invisible to the read (then the chunk is read again).
func (st *streamState) emitChunk(ctx context.Context, j *tableJob, c *chunk) chunkResult {
	for _, x := range c.xip {
		if lsn, ok := j.history[x]; ok && lsn < j.lowLSN {
			return chunkResult{retry: fmt.Sprintf("transaction %d committed before the low watermark but was not visible to the read", x)}
		}
	}
	if j.truncated {
		return chunkResult{retry: "the table was truncated while the chunk was read"}
	}
	// No later read's snapshot has a transaction below this one's xmin in
	// progress.
	for x := range j.history {
		if int32(x-c.xmin) < 0 {
			delete(j.history, x)
		}
	}
	mark := &txnMark{}
	at := txnInfo{lsn: j.id, commitLSN: st.at.commitLSN, commitTime: st.at.commitTime, snapshot: true}
	res := chunkResult{mark: mark}
	for i, key := range c.keys {
		if j.touched[string(key)] {
			continue
		}
		st.s.produce(ctx, st.enc.snapshotRow(j.rel, key, c.rows[i], &at), mark, at.commitLSN)
		res.emitted++
	}
	st.s.met.snapshotRows.Add(float64(res.emitted))
	return res
}

// runTableSnapshots runs the pending online snapshots of the slot's
// tables, one at a time, and looks for new requests every poll, until ctx
// ends. It runs beside the replication loop, which it needs to see its
// watermarks. An error ends the session (setFatal); a request that cannot
// be honoured is marked with its error and left.
func (s *Streamer) runTableSnapshots(ctx context.Context, pool *pgxpool.Pool) {
	if err := s.ensureTopic(ctx, s.stateTopic(), 1, wire.StateTopicConfigs()); err != nil {
		if ctx.Err() == nil {
			s.setFatal(err)
		}
		return
	}
	view, err := newStateView(s.cfg.Kafka, s.stateTopic())
	if err != nil {
		s.setFatal(err)
		return
	}
	defer view.close()
	for {
		if err := view.catchUp(ctx); err != nil {
			if ctx.Err() == nil {
				s.setFatal(err)
			}
			return
		}
		// One at a time, reading the state again after each: a job that
		// was requested again while it ran starts over.
		if reqs := view.pending(s.cfg.Slot); len(reqs) > 0 {
			if err := s.snapshotTableOnline(ctx, pool, view, reqs[0]); err != nil {
				if ctx.Err() == nil {
					s.setFatal(fmt.Errorf("online snapshot of %s: %w", reqs[0].Table, err))
				}
				return
			}
			continue
		}
		if !ctxtime.Sleep(ctx, s.cfg.TablePoll) {
			return
		}
	}
}

// errRefused is a request decant cannot honour (no such table, no
// primary key, not in the publication and may not add it).
type errRefused struct{ msg string }

func (e errRefused) Error() string { return e.msg }

// snapshotTableOnline runs (or resumes) one table's online snapshot.
func (s *Streamer) snapshotTableOnline(ctx context.Context, pool *pgxpool.Pool, view *stateView, req wire.TableSnapshot) error {
	j, err := s.prepareTableJob(ctx, pool, req.Table)
	var refused errRefused
	if errors.As(err, &refused) {
		s.log.Error("online snapshot refused", "table", req.Table, "err", err)
		req.Error = err.Error()
		return s.writeTableSnapshot(ctx, req)
	}
	if err != nil {
		return err
	}
	s.job.Store(j)
	defer s.job.Store(nil)
	// Every transaction running now must end before the first read: one
	// whose commit precedes the job (and so escaped its history) must be
	// visible to every read. Transactions that get an xid later commit
	// after start, which the loop records.
	var start uint64
	var startText string
	var xmax int64
	if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, pg_snapshot_xmax(pg_current_snapshot())::text::int8`).Scan(&startText, &xmax); err != nil {
		return fmt.Errorf("read the WAL position: %w", err)
	}
	if start, err = wire.ParseLSN(startText); err != nil {
		return err
	}
	if err := s.waitTransactions(ctx, pool, req.Table, xmax); err != nil {
		return err
	}
	if req.ID == "" {
		req.ID = wire.FormatLSN(start)
		req.Rows = 0
		req.LastKey = nil
	}
	if j.id, err = wire.ParseLSN(req.ID); err != nil {
		return fmt.Errorf("snapshot id %q: %w", req.ID, err)
	}
	s.log.Info("online snapshot of table started", "table", req.Table, "id", req.ID, "resume_after", string(req.LastKey))
	started, lastLog, lastCatchUp := time.Now(), time.Now(), time.Now()
	retries := 0 // chunks read again in a row
	for n := 0; ; n++ {
		if newer, ok := view.latest(s.cfg.Slot, req.Table); ok && newer.ID == "" && !newer.Done && newer.Time != req.Time {
			s.log.Info("online snapshot of table requested again; starting over", "table", req.Table)
			return nil
		}
		c, res, err := s.snapshotChunk(ctx, pool, j, n, req.LastKey)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "42") {
			// No privilege, or the table or a column is gone: retrying
			// cannot help, and the stream goes on without it.
			s.log.Error("online snapshot given up", "table", req.Table, "err", err)
			req.Error = err.Error()
			return s.writeTableSnapshot(ctx, req)
		}
		if err != nil {
			return err
		}
		if res.mark == nil {
			if retries++; retries%10 == 0 {
				s.log.Info("online snapshot chunk read again", "table", req.Table, "times", retries, "why", res.retry)
			}
			continue
		}
		retries = 0
		if err := s.waitAcked(ctx, res.mark); err != nil {
			return err
		}
		req.Rows += int64(res.emitted)
		if len(c.keys) > 0 {
			req.LastKey = c.keys[len(c.keys)-1]
		}
		req.Done = len(c.keys) < s.cfg.SnapshotChunkRows
		if err := s.writeTableSnapshot(ctx, req); err != nil {
			return err
		}
		if req.Done {
			s.log.Info("online snapshot of table complete", "table", req.Table, "rows", req.Rows, "took", time.Since(started).Round(time.Millisecond))
			return view.catchUp(ctx)
		}
		if time.Since(lastCatchUp) > time.Second { // for a new request of the same table
			if err := view.catchUp(ctx); err != nil {
				return err
			}
			lastCatchUp = time.Now()
		}
		if time.Since(lastLog) > 10*time.Second {
			s.log.Info("online snapshot progress", "table", req.Table, "rows", req.Rows, "last_key", string(req.LastKey))
			lastLog = time.Now()
		}
	}
}

// rowQuerier is a *pgx.Conn or a *pgxpool.Pool.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// CheckOnlineTable says, reading the catalog only, whether table
// ("schema.table") can be snapshotted online (`decant snapshot`): it
// exists, has a primary key, and is in the publication or may be added
// to it (createPublication). A refusal says what to do.
func CheckOnlineTable(ctx context.Context, db rowQuerier, publication string, createPublication bool, table string) error {
	_, _, err := checkOnlineTable(ctx, db, publication, createPublication, table)
	return err
}

func checkOnlineTable(ctx context.Context, db rowQuerier, publication string, createPublication bool, table string) (oid uint32, published bool, err error) {
	schema, name, ok := strings.Cut(table, ".")
	if !ok || schema == "" || name == "" {
		return 0, false, errRefused{fmt.Sprintf("table %q: name it schema.table, e.g. public.orders", table)}
	}
	var hasPK, standby bool
	err = db.QueryRow(ctx, `SELECT c.oid, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary),
  EXISTS (SELECT 1 FROM pg_publication_tables pt WHERE pt.pubname = $3 AND pt.schemaname = n.nspname AND pt.tablename = c.relname),
  pg_is_in_recovery()
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'`, schema, name, publication).Scan(&oid, &hasPK, &published, &standby)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, errRefused{fmt.Sprintf("table %s does not exist (names are case-sensitive; a partitioned table is snapshotted through its partitions)", table)}
	}
	if err != nil {
		return 0, false, fmt.Errorf("read table %s: %w", table, err)
	}
	if !hasPK {
		return 0, false, errRefused{fmt.Sprintf("table %s has no primary key: an online snapshot reads a table in primary-key order", table)}
	}
	if standby {
		return 0, false, errRefused{fmt.Sprintf("postgres.dsn is a hot standby: an online snapshot of %s writes watermarks to the WAL, which a standby cannot; add the table to the publication on the primary and recreate the slot, or stream from the primary", table)}
	}
	if !published && !createPublication {
		return 0, false, errRefused{fmt.Sprintf("table %s is not in publication %s and postgres.create_publication is false: run ALTER PUBLICATION %s ADD TABLE %s; first",
			table, publication, pgx.Identifier{publication}.Sanitize(), pgx.Identifier{schema, name}.Sanitize())}
	}
	return oid, published, nil
}

// prepareTableJob checks the table, adds it to the publication when it is
// not in it (postgres.create_publication), and builds its relation as
// pgoutput will send it.
func (s *Streamer) prepareTableJob(ctx context.Context, pool *pgxpool.Pool, table string) (*tableJob, error) {
	oid, published, err := checkOnlineTable(ctx, pool, s.cfg.Publication, s.cfg.CreatePublication, table)
	if err != nil {
		return nil, err
	}
	schema, name, _ := strings.Cut(table, ".")
	if !published {
		if err := s.addToPublication(ctx, pool, []string{table}); err != nil {
			return nil, err
		}
	}
	_, listed, gen18, err := s.publishedTable(ctx, pool, schema, name)
	if err != nil {
		return nil, err
	}
	all, pk, generated, err := tableColumns(ctx, pool, oid)
	if err != nil {
		return nil, err
	}
	if len(pk) == 0 {
		return nil, errRefused{fmt.Sprintf("table %s has no primary key: an online snapshot reads a table in primary-key order", table)}
	}
	cols, _ := publishedColumns(all, generated, listed, gen18)
	rm := &pglogrepl.RelationMessage{RelationID: oid, Namespace: schema, RelationName: name, Columns: make([]*pglogrepl.RelationMessageColumn, len(cols))}
	oids := make([]uint32, len(cols))
	for i := range cols {
		rm.Columns[i] = &cols[i]
		oids[i] = cols[i].DataType
	}
	if err := s.types.load(ctx, pool, oids...); err != nil {
		return nil, fmt.Errorf("table %s: load column types: %w", table, err)
	}
	r, err := newRelation(rm, pk, s.cfg.TopicPrefix)
	if err != nil {
		return nil, errRefused{err.Error()}
	}
	if err := s.ensureTopic(ctx, r.topic, int32(s.cfg.Partitions), wire.RawTopicConfigs()); err != nil {
		return nil, err
	}
	return &tableJob{rel: r, token: fmt.Sprintf("%s/%d", table, time.Now().UnixNano()), result: make(chan chunkResult, 1),
		open: -1, touched: map[string]bool{}, history: map[uint32]uint64{}}, nil
}

// publishedTable says whether the publication publishes the table, and
// its column list (pg_publication_tables.attnames; see publishedColumns).
func (s *Streamer) publishedTable(ctx context.Context, pool *pgxpool.Pool, schema, name string) (bool, []string, bool, error) {
	var attnames *string
	var gen18 bool
	err := pool.QueryRow(ctx, `SELECT (to_jsonb(pt) -> 'attnames')::text, current_setting('server_version_num')::int >= 180000
FROM pg_publication_tables pt WHERE pt.pubname = $1 AND pt.schemaname = $2 AND pt.tablename = $3`, s.cfg.Publication, schema, name).Scan(&attnames, &gen18)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, false, nil
	}
	if err != nil {
		return false, nil, false, fmt.Errorf("read publication %s: %w", s.cfg.Publication, err)
	}
	var listed []string
	if attnames != nil && *attnames != "null" {
		if err := json.Unmarshal([]byte(*attnames), &listed); err != nil {
			return false, nil, false, fmt.Errorf("columns of %s.%s: %w", schema, name, err)
		}
	}
	return true, listed, gen18, nil
}

// addToPublication adds tables ("schema.table") to the publication.
func (s *Streamer) addToPublication(ctx context.Context, pool *pgxpool.Pool, tables []string) error {
	names := make([]string, len(tables))
	for i, t := range tables {
		schema, name, _ := strings.Cut(t, ".")
		names[i] = pgx.Identifier{schema, name}.Sanitize()
	}
	_, err := pool.Exec(ctx, "ALTER PUBLICATION "+pgx.Identifier{s.cfg.Publication}.Sanitize()+" ADD TABLE "+strings.Join(names, ", "))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42710" { // added meanwhile
		err = nil
	}
	if err != nil {
		return fmt.Errorf("add %s to publication %s: %w", strings.Join(tables, ", "), s.cfg.Publication, err)
	}
	s.log.Info("added tables to the publication", "publication", s.cfg.Publication, "tables", strings.Join(tables, ","))
	return nil
}

// waitTransactions waits until every transaction with an xid below xmax
// has ended.
func (s *Streamer) waitTransactions(ctx context.Context, pool *pgxpool.Pool, table string, xmax int64) error {
	logged := time.Now()
	for {
		var ended bool
		if err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8 >= $1`, xmax).Scan(&ended); err != nil {
			return fmt.Errorf("read running transactions: %w", err)
		}
		if ended {
			return nil
		}
		if time.Since(logged) > 10*time.Second {
			s.log.Info("online snapshot waits for the transactions running when it started to end", "table", table)
			logged = time.Now()
		}
		if !ctxtime.Sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// snapshotChunk writes chunk n's low watermark, reads the rows after
// after (the first ones when nil) in key order, hands them to the loop,
// writes the high watermark and waits for the loop's answer.
func (s *Streamer) snapshotChunk(ctx context.Context, pool *pgxpool.Pool, j *tableJob, n int, after json.RawMessage) (*chunk, chunkResult, error) {
	mark := func(kind string) error {
		v, _ := json.Marshal(watermark{Job: j.token, Chunk: n, Mark: kind})
		if _, err := pool.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::text)`, watermarkPrefix, string(v)); err != nil {
			return fmt.Errorf("write the %s watermark: %w", kind, err)
		}
		return nil
	}
	if err := mark("low"); err != nil {
		return nil, chunkResult{}, err
	}
	c, err := s.readChunk(ctx, pool, j, n, after)
	if err != nil {
		return nil, chunkResult{}, err
	}
	if afterChunkRead != nil {
		afterChunkRead()
	}
	j.mu.Lock()
	j.chunk = c
	j.mu.Unlock()
	if err := mark("high"); err != nil {
		return nil, chunkResult{}, err
	}
	select {
	case res := <-j.result:
		return c, res, nil
	case <-ctx.Done():
		return nil, chunkResult{}, ctx.Err()
	}
}

// readChunk reads up to SnapshotChunkRows rows whose key follows after,
// in key order, in a repeatable-read transaction, with its snapshot's
// xmin and in-progress transactions.
func (s *Streamer) readChunk(ctx context.Context, pool *pgxpool.Pool, j *tableJob, n int, after json.RawMessage) (*chunk, error) {
	r := j.rel
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	c := &chunk{n: n}
	var snap string
	if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snap); err != nil {
		return nil, fmt.Errorf("read the chunk's snapshot: %w", err)
	}
	if c.xmin, c.xip, err = parseSnapshot(snap); err != nil {
		return nil, err
	}
	sql, args := chunkSQL(j.rel, after, s.cfg.SnapshotChunkRows)
	rows, err := tx.Query(ctx, sql, append([]any{pgx.QueryResultFormats{pgx.TextFormatCode}}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("read chunk %d: %w", n, err)
	}
	defer rows.Close()
	enc := &encoder{types: s.types}
	for rows.Next() {
		key, row, err := enc.snapshotValues(nil, r, rows.RawValues())
		if err != nil {
			return nil, permanent(fmt.Errorf("read chunk %d: %w", n, err))
		}
		c.keys = append(c.keys, key)
		c.rows = append(c.rows, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read chunk %d: %w", n, err)
	}
	return c, tx.Commit(ctx)
}

// chunkSQL is the statement of one chunk: the row as the initial
// snapshot reads it (snapshotSelect), after the key after (typed by
// jsonb_populate_record), in key order, at most limit rows.
func chunkSQL(r *relation, after json.RawMessage, limit int) (string, []any) {
	table := pgx.Identifier{r.schema, r.table}.Sanitize()
	keyCols, afterCols := make([]string, len(r.key)), make([]string, len(r.key))
	for i, ki := range r.key {
		col := pgx.Identifier{r.cols[ki].Name}.Sanitize()
		keyCols[i], afterCols[i] = "t."+col, "a."+col
	}
	sql := "SELECT " + snapshotSelect(r) + " FROM " + table + " t"
	var args []any
	if after != nil {
		sql += " WHERE (" + strings.Join(keyCols, ", ") + ") > (SELECT " + strings.Join(afterCols, ", ") + " FROM jsonb_populate_record(NULL::" + table + ", $1::jsonb) a)"
		args = append(args, string(after))
	}
	sql += " ORDER BY " + strings.Join(keyCols, ", ") + " LIMIT " + strconv.Itoa(limit)
	return sql, args
}

// parseSnapshot parses pg_current_snapshot()'s text, xmin:xmax:xip,…,
// into 32-bit xids as pgoutput sends them.
func parseSnapshot(s string) (xmin uint32, xip []uint32, err error) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, nil, fmt.Errorf("snapshot %q: want xmin:xmax:xip", s)
	}
	v, err := strconv.ParseUint(parts[0], 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("snapshot %q: %w", s, err)
	}
	xmin = uint32(v)
	if parts[2] != "" {
		for _, x := range strings.Split(parts[2], ",") {
			v, err := strconv.ParseUint(x, 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("snapshot %q: %w", s, err)
			}
			xip = append(xip, uint32(v))
		}
	}
	return xmin, xip, nil
}

// waitAcked waits until Kafka acknowledged every record of m.
func (s *Streamer) waitAcked(ctx context.Context, m *txnMark) error {
	for m.pending.Load() > 0 {
		if err := s.fatalErr(); err != nil {
			return err
		}
		if !ctxtime.Sleep(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	return s.fatalErr()
}

// writeTableSnapshot records a table's online snapshot state.
func (s *Streamer) writeTableSnapshot(ctx context.Context, ts wire.TableSnapshot) error {
	ts.Slot = s.cfg.Slot
	ts.Time = time.Now().UTC().Format(time.RFC3339Nano)
	return RequestTableSnapshot(ctx, s.kafka, s.cfg.TopicPrefix, ts)
}

// RequestTableSnapshot writes ts to the state topic (which must exist):
// with ID empty and Done false it asks the streamer of ts.Slot to
// snapshot ts.Table online (`decant snapshot`). ts.Time must be set.
func RequestTableSnapshot(ctx context.Context, cl *kgo.Client, topicPrefix string, ts wire.TableSnapshot) error {
	v, err := json.Marshal(ts)
	if err != nil {
		return err
	}
	topic := wire.StateTopic(topicPrefix)
	rec := &kgo.Record{Topic: topic, Key: []byte(wire.TableSnapshotKey(ts.Slot, ts.Table)), Value: v}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("write the snapshot state of %s to %s: %w", ts.Table, topic, err)
	}
	return nil
}

// requestMappedTables, before the session takes the slot, adds the tables
// the mappings use (Config.Tables, when the publication may be changed)
// and the publication does not publish, and requests their online
// snapshot. The request is written first: a crash between the two leaves
// a request for a table still outside the publication, which the job adds.
func (s *Streamer) requestMappedTables(ctx context.Context, pool *pgxpool.Pool) (added []string, err error) {
	if !s.cfg.CreatePublication || len(s.cfg.Tables) == 0 {
		return nil, nil
	}
	var standby bool
	if err := pool.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&standby); err != nil {
		return nil, fmt.Errorf("read pg_is_in_recovery(): %w", err)
	}
	if standby {
		return nil, nil // read-only: decant check names the tables to add on the primary
	}
	for _, t := range s.cfg.Tables {
		schema, name, ok := strings.Cut(t, ".")
		if !ok {
			schema, name = "public", t
		}
		published, _, _, err := s.publishedTable(ctx, pool, schema, name)
		if err != nil {
			return nil, err
		}
		if !published {
			added = append(added, schema+"."+name)
		}
	}
	if len(added) == 0 {
		return nil, nil
	}
	if err := s.ensureTopic(ctx, s.stateTopic(), 1, wire.StateTopicConfigs()); err != nil {
		return nil, err
	}
	for _, t := range added {
		if err := s.writeTableSnapshot(ctx, wire.TableSnapshot{Table: t}); err != nil {
			return nil, err
		}
		s.log.Info("a mapping uses a table outside the publication: adding it and snapshotting it online", "table", t)
	}
	return added, s.addToPublication(ctx, pool, added)
}

// stateView follows the state topic: the latest value of each key.
type stateView struct {
	cl     *kgo.Client
	adm    *kadm.Client
	topic  string
	values map[string][]byte
	next   int64 // the offset to read next
}

func newStateView(kopts []kgo.Opt, topic string) (*stateView, error) {
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, kopts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return nil, err
	}
	return &stateView{cl: cl, adm: kadm.NewClient(cl), topic: topic, values: map[string][]byte{}}, nil
}

func (v *stateView) close() { v.cl.Close() }

// catchUp reads the state topic (which must exist) up to its end offset now.
func (v *stateView) catchUp(ctx context.Context) error {
	ends, err := v.adm.ListEndOffsets(ctx, v.topic)
	if err != nil {
		return fmt.Errorf("read %s: %w", v.topic, err)
	}
	end, ok := ends.Lookup(v.topic, 0)
	if !ok || end.Err != nil {
		return fmt.Errorf("read %s: no end offset (%v)", v.topic, end.Err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for v.next < end.Offset {
		fs := v.cl.PollFetches(rctx)
		if err := rctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", v.topic, err)
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return fmt.Errorf("read %s: %w", v.topic, ferr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v.next = r.Offset + 1
			if r.Value == nil {
				delete(v.values, string(r.Key))
			} else {
				v.values[string(r.Key)] = r.Value
			}
		})
	}
	return nil
}

// ReadTableSnapshot reads the latest state of table's online snapshot for
// slot from the state topic of topicPrefix; false when there is none.
func ReadTableSnapshot(ctx context.Context, kopts []kgo.Opt, topicPrefix, slot, table string) (wire.TableSnapshot, bool, error) {
	v, err := newStateView(kopts, wire.StateTopic(topicPrefix))
	if err != nil {
		return wire.TableSnapshot{}, false, err
	}
	defer v.close()
	if err := v.catchUp(ctx); err != nil {
		return wire.TableSnapshot{}, false, err
	}
	ts, ok := v.latest(slot, table)
	return ts, ok, nil
}

// latest is the state of a table's online snapshot.
func (v *stateView) latest(slot, table string) (wire.TableSnapshot, bool) {
	var ts wire.TableSnapshot
	b, ok := v.values[wire.TableSnapshotKey(slot, table)]
	return ts, ok && json.Unmarshal(b, &ts) == nil
}

// pending lists the slot's online snapshots not done nor refused.
func (v *stateView) pending(slot string) []wire.TableSnapshot {
	prefix := wire.TableSnapshotKey(slot, "")
	var out []wire.TableSnapshot
	for k, b := range v.values {
		var ts wire.TableSnapshot
		if strings.HasPrefix(k, prefix) && json.Unmarshal(b, &ts) == nil && !ts.Done && ts.Error == "" {
			out = append(out, ts)
		}
	}
	slices.SortFunc(out, func(a, b wire.TableSnapshot) int { return strings.Compare(a.Table, b.Table) })
	return out
}
