package streamer

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/decant-cdc/decant/wire"
)

// stream is the replication loop: WAL messages → records → Kafka, with the
// slot confirmed only as far as progress allows.
func (s *Streamer) stream(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.PgConn, start uint64) error {
	s.fatal.Store(nil)
	prog := newProgress(start)
	st := &streamState{s: s, pool: pool, prog: prog, rels: map[uint32]*relation{}, enc: &encoder{types: s.types, redact: s.redact}, spools: map[uint32]*spool{}}
	defer st.closeSpools()
	s.lastMsg.Store(time.Now().UnixNano())

	hbCtx, stopHB := context.WithCancel(ctx)
	hbDone := make(chan struct{})
	go func() { defer close(hbDone); s.heartbeat(hbCtx, pool) }()
	defer func() { stopHB(); <-hbDone }()

	rep := &statusReporter{s: s, repl: repl, prog: prog}
	// On the way out of a stopped session, wait for what was produced and
	// confirm it, so a clean shutdown does not re-send what Kafka already
	// has. A failed session does not wait: what Kafka has not acknowledged
	// is dropped (dropUnacknowledged) and streamed again.
	defer func() {
		if ctx.Err() == nil {
			return
		}
		fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.kafka.Flush(fctx); err == nil && s.fatalErr() == nil {
			_ = rep.report(fctx)
		}
	}()

	// A long replay of a streamed transaction reads nothing from the
	// server; status updates keep the walsender from timing it out
	// (wal_sender_timeout counts from the last reply).
	st.keepalive = func() error { return rep.report(ctx) }
	// Reads use a plain read deadline on the socket, not a context: pgconn
	// watches a cancellable context with a goroutine per call, which costs
	// more than decoding a row. Cancellation sets the deadline to now.
	conn := repl.Conn()
	stopWatch := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	defer stopWatch()
	defer conn.SetReadDeadline(time.Time{})
	// Online table snapshots run beside the loop, which sees their
	// watermarks; they end with it.
	jobCtx, stopJobs := context.WithCancel(ctx)
	jobsDone := make(chan struct{})
	go func() { defer close(jobsDone); s.runTableSnapshots(jobCtx, pool) }()
	defer func() { stopJobs(); <-jobsDone }()
	now := time.Now()
	l := &receiveLoop{s: s, st: st, rep: rep, repl: repl,
		nextStatus: now.Add(s.cfg.StatusInterval), progressLog: now.Add(30 * time.Second), checkClock: true}
	return l.run(ctx)
}

// statusReporter sends standby status updates: the confirmable LSN as
// written, flushed and applied.
type statusReporter struct {
	s    *Streamer
	repl *pgconn.PgConn
	prog *progress
	last uint64 // the LSN last reported
}

func (r *statusReporter) report(ctx context.Context) error {
	lsn := r.prog.confirmable()
	err := pglogrepl.SendStandbyStatusUpdate(ctx, r.repl, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(lsn), WALFlushPosition: pglogrepl.LSN(lsn), WALApplyPosition: pglogrepl.LSN(lsn)})
	if err != nil {
		return fmt.Errorf("send status update: %w", err)
	}
	if lsn != r.last {
		r.s.met.confirmedLSN.Set(float64(lsn))
		r.last = lsn
	}
	return nil
}

// receiveLoop reads the replication connection and hands each message on;
// between messages it reports status when due.
type receiveLoop struct {
	s    *Streamer
	st   *streamState
	rep  *statusReporter
	repl *pgconn.PgConn

	nextStatus  time.Time // when the next status update is due
	progressLog time.Time // when the next progress line is due
	deadline    time.Time // the read deadline set on the socket
	sawData     bool      // data arrived since the clock was last read
	checkClock  bool      // read the clock before the next message
}

// The clock is read every clockEvery messages, or at once when a read
// timed out or the server asked for a reply: twice per row was measurable.
const clockEvery = 128

// run returns nil when ctx ends, and an error when the stream fails.
func (l *receiveLoop) run(ctx context.Context) error {
	conn := l.repl.Conn()
	for i := 0; ; i++ {
		if err := l.s.fatalErr(); err != nil {
			return err
		}
		if l.checkClock || i%clockEvery == 0 {
			l.checkClock = false
			if err := l.tick(ctx); err != nil {
				return err
			}
		}
		if !l.deadline.Equal(l.nextStatus) && ctx.Err() == nil {
			l.deadline = l.nextStatus
			if err := conn.SetReadDeadline(l.deadline); err != nil {
				return fmt.Errorf("set read deadline: %w", err)
			}
		}
		msg, err := l.repl.ReceiveMessage(context.Background())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if pgconn.Timeout(err) {
				l.checkClock = true
				continue
			}
			return fmt.Errorf("receive from slot: %w", err)
		}
		if err := l.dispatch(ctx, msg); err != nil {
			return err
		}
	}
}

// tick reads the clock: it records that data arrived, and sends a status
// update (and now and then a progress line) when one is due.
func (l *receiveLoop) tick(ctx context.Context) error {
	now := time.Now()
	if l.sawData {
		l.s.lastMsg.Store(now.UnixNano())
		l.sawData = false
	}
	if now.Before(l.nextStatus) {
		return nil
	}
	if err := l.rep.report(ctx); err != nil {
		return err
	}
	l.nextStatus = now.Add(l.s.cfg.StatusInterval)
	if now.After(l.progressLog) {
		l.s.log.Info("streaming progress", "confirmed_lsn", wire.FormatLSN(l.rep.last), "txns_in_flight", l.st.prog.inFlight())
		l.progressLog = now.Add(30 * time.Second)
	}
	return nil
}

// dispatch handles one message of the replication protocol.
func (l *receiveLoop) dispatch(ctx context.Context, msg pgproto3.BackendMessage) error {
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		switch m.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
			if err != nil {
				return fmt.Errorf("parse keepalive: %w", err)
			}
			if l.st.cur == nil {
				l.st.prog.idle(uint64(pkm.ServerWALEnd))
			}
			if pkm.ReplyRequested {
				l.nextStatus = time.Time{}
			}
			l.checkClock = true
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(m.Data[1:])
			if err != nil {
				return fmt.Errorf("parse XLogData: %w", err)
			}
			l.sawData = true
			if err := l.st.handle(ctx, uint64(xld.WALStart), xld.WALData); err != nil {
				return err
			}
		}
	case *pgproto3.ErrorResponse:
		return l.s.replicationError(pgconn.ErrorResponseToPgError(m))
	case *pgproto3.CopyDone:
		return errors.New("replication stream ended by the server")
	}
	return nil
}

// streamState is what the loop keeps between messages.
type streamState struct {
	s    *Streamer
	pool *pgxpool.Pool
	prog *progress
	rels map[uint32]*relation
	enc  *encoder
	dec  rowDecoder
	cur  *txnMark // open transaction, nil between transactions
	at   txnInfo

	// Protocol 2: transactions PostgreSQL streams before they commit.
	spools   map[uint32]*spool // by top-level xid
	inStream bool              // between stream start and stream stop
	spooling *spool            // the spool of the open stream block
	scratch  []byte            // for encoded records on their way to a spool
	// keepalive sends a status update; see commitStreamed.
	keepalive func() error
}

// closeSpools releases the spools of transactions that did not finish.
func (st *streamState) closeSpools() {
	for xid, sp := range st.spools {
		_ = sp.close()
		delete(st.spools, xid)
	}
}

func (st *streamState) handle(ctx context.Context, walStart uint64, data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("empty pgoutput message at %s", wire.FormatLSN(walStart))
	}
	typ := pglogrepl.MessageType(data[0])
	if st.inStream {
		// Inside a stream block every message belongs to the in-progress
		// transaction: spool it, emit it at commit.
		switch typ {
		case pglogrepl.MessageTypeStreamStop:
			st.inStream = false
			return nil
		case pglogrepl.MessageTypeStreamStart, pglogrepl.MessageTypeStreamCommit, pglogrepl.MessageTypeStreamAbort,
			pglogrepl.MessageTypeBegin, pglogrepl.MessageTypeCommit:
			return fmt.Errorf("pgoutput message %s at %s inside a stream block", typ, wire.FormatLSN(walStart))
		}
		return st.spoolStreamed(ctx, walStart, data)
	}
	if isRowMessage(data[0]) {
		return st.row(ctx, walStart, data, false, nil)
	}
	msg, err := parseMessage(data, false)
	if err != nil {
		return fmt.Errorf("decode pgoutput message at %s: %w", wire.FormatLSN(walStart), err)
	}
	switch m := msg.(type) {
	case *pglogrepl.StreamStartMessageV2:
		sp := st.spools[m.Xid]
		if sp == nil {
			if sp, err = newSpool(st.s.cfg.SpoolDir, m.Xid); err != nil {
				return err
			}
			st.spools[m.Xid] = sp
			st.s.met.streamedTxns.Inc()
		}
		st.inStream, st.spooling = true, sp
	case *pglogrepl.StreamAbortMessageV2:
		sp := st.spools[m.Xid]
		if sp == nil {
			return nil
		}
		if m.SubXid != m.Xid {
			sp.abortSub(m.SubXid)
			return nil
		}
		delete(st.spools, m.Xid)
		return sp.close()
	case *pglogrepl.StreamCommitMessageV2:
		return st.commitStreamed(ctx, m)
	default:
		return st.apply(ctx, walStart, msg)
	}
	return nil
}

// commitStreamed replays a streamed transaction at its commit, minus the
// row changes of aborted subtransactions, as if it had been sent whole.
func (st *streamState) commitStreamed(ctx context.Context, m *pglogrepl.StreamCommitMessageV2) error {
	if st.cur != nil {
		return fmt.Errorf("stream commit at %s inside a transaction", wire.FormatLSN(uint64(m.CommitLSN)))
	}
	st.cur = st.prog.open()
	st.at = txnInfo{commitLSN: uint64(m.CommitLSN), xid: m.Xid, commitTime: m.CommitTime}
	if sp := st.spools[m.Xid]; sp != nil {
		delete(st.spools, m.Xid)
		nextStatus, i := time.Now().Add(st.s.cfg.StatusInterval), 0
		err := sp.replay(func(kind byte, walStart uint64, data []byte) error {
			if i++; i%4096 == 0 && st.keepalive != nil && time.Now().After(nextStatus) {
				if err := st.keepalive(); err != nil {
					return err
				}
				nextStatus = time.Now().Add(st.s.cfg.StatusInterval)
			}
			if kind == spoolRecord {
				return st.replayRecord(ctx, sp, walStart, data)
			}
			if isRowMessage(data[0]) {
				return st.row(ctx, walStart, data, true, sp.aborted)
			}
			msg, err := parseMessage(data, true)
			if err != nil {
				return fmt.Errorf("decode streamed pgoutput message at %s: %w", wire.FormatLSN(walStart), err)
			}
			if m, ok := msg.(*pglogrepl.TruncateMessageV2); ok && sp.aborted[m.Xid] {
				return nil
			}
			return st.apply(ctx, walStart, msg)
		})
		if cerr := sp.close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return st.apply(ctx, uint64(m.CommitLSN), &pglogrepl.CommitMessage{CommitLSN: m.CommitLSN, TransactionEndLSN: m.TransactionEndLSN, CommitTime: m.CommitTime})
}

// spoolStreamed spools one message of a stream block. A row change of a
// relation whose key and column types are certain (streamRelation) is
// encoded now, while PostgreSQL still decodes the rest of the transaction,
// so that its commit only adds the commit's fields; everything else is
// spooled as received and decoded at commit, as is a row that fails to
// decode or encode now (the commit reports it, or sends it to the
// dead-letter topic, as for any transaction).
func (st *streamState) spoolStreamed(ctx context.Context, walStart uint64, data []byte) error {
	sp := st.spooling
	switch {
	case isRowMessage(data[0]) && len(data) >= 9: // type, xid, relation id, …
		if r := sp.relation(binary.BigEndian.Uint32(data[5:9])); r != nil {
			if m, err := st.dec.decode(data, true); err == nil {
				at := txnInfo{lsn: walStart, headOnly: true}
				if recs, err := st.enc.change(r, m.op, m.old, m.oldType, m.new, &at); err == nil {
					for i, rec := range recs {
						er := encodedRecord{xid: m.xid, version: uint32(sp.rels[r.id]), op: rec.op, tomb: rec.value == nil, key: rec.key, head: rec.value}
						if i == 0 {
							er.count = m.op
						}
						if st.scratch, err = sp.addRecord(walStart, er, st.scratch); err != nil {
							return err
						}
					}
					st.s.encodedEarly.Add(1)
					return nil
				}
			}
		}
		st.s.encodedAtCommit.Add(1)
	case data[0] == byte(pglogrepl.MessageTypeRelation):
		st.streamRelation(ctx, data)
	}
	return sp.add(spoolMessage, walStart, data)
}

// streamRelation learns, for the streamed transaction alone, a relation
// message of its stream block. Its rows may be encoded before the commit
// only if the message has the same columns and replica identity as the
// relation this transaction's rows are already encoded with, as the one
// decant streams, or as the table's catalog now (the commit reads the
// catalog too, later). A column, type or key changed inside the
// transaction and not yet committed fails all three, and leaves the rows
// to be decoded at commit.
// (types are loaded only for columns the committed catalog has: pgTypes.load
// remembers an OID it cannot find.)
func (st *streamState) streamRelation(ctx context.Context, data []byte) {
	sp := st.spooling
	msg, err := parseMessage(data, true)
	if err != nil {
		return // the commit reports it
	}
	m, ok := msg.(*pglogrepl.RelationMessageV2)
	if !ok {
		return
	}
	if r := sp.relation(m.RelationID); r != nil && r.sameShape(&m.RelationMessage) {
		return // PostgreSQL sent it again (after an invalidation): nothing changed
	}
	if sp.rels == nil {
		sp.rels = map[uint32]int{}
	}
	sp.rels[m.RelationID] = -1
	var pk []string
	if g := st.rels[m.RelationID]; g != nil && g.sameShape(&m.RelationMessage) {
		for _, i := range g.key {
			pk = append(pk, g.cols[i].Name)
		}
	} else {
		all, cpk, generated, err := tableColumns(ctx, st.pool, m.RelationID)
		cols, _ := publishedColumns(all, generated, nil, false)
		if err != nil || !sameColumns(cols, m.Columns) || !identityIsKey(m.Columns, cpk) {
			return
		}
		oids := make([]uint32, len(cols))
		for i, c := range cols {
			oids[i] = c.DataType
		}
		if err := st.s.types.load(ctx, st.pool, oids...); err != nil {
			return
		}
		pk = cpk
	}
	if r, err := newRelation(&m.RelationMessage, pk, st.s.cfg.TopicPrefix); err == nil {
		sp.rels[m.RelationID] = len(sp.versions)
		sp.versions = append(sp.versions, r)
	}
}

// replayRecord produces, at its transaction's commit, one record encoded
// while the transaction streamed.
func (st *streamState) replayRecord(ctx context.Context, sp *spool, walStart uint64, data []byte) error {
	er, err := parseEncodedRecord(data)
	if err != nil {
		return fmt.Errorf("spool of streamed transaction %d: record at %s: %w", sp.xid, wire.FormatLSN(walStart), err)
	}
	if sp.aborted[er.xid] {
		return nil
	}
	if int(er.version) >= len(sp.versions) {
		return fmt.Errorf("spool of streamed transaction %d: record at %s of unknown relation version %d", sp.xid, wire.FormatLSN(walStart), er.version)
	}
	r := sp.versions[er.version]
	var value []byte
	if !er.tomb {
		value = st.enc.eventTail(er.head, &st.at)
	}
	st.s.produce(ctx, record{r.topic, er.key, value, er.op}, st.cur, st.at.commitLSN)
	if er.count != "" {
		r.counter(st.s.met, er.count).Inc()
	}
	return nil
}

// row decodes and encodes one row message; a change of a subtransaction
// in aborted is skipped.
func (st *streamState) row(ctx context.Context, walStart uint64, data []byte, inStream bool, aborted map[uint32]bool) error {
	m, err := st.dec.decode(data, inStream)
	if err != nil {
		return fmt.Errorf("decode pgoutput row message at %s: %w", wire.FormatLSN(walStart), err)
	}
	if aborted[m.xid] {
		return nil
	}
	return st.change(ctx, walStart, m.relation, m.op, m.old, m.oldType, m.new)
}

// apply handles one decoded message of a transaction, sent whole or replayed
// from a spool.
func (st *streamState) apply(ctx context.Context, walStart uint64, msg pglogrepl.Message) error {
	switch m := msg.(type) {
	case *pglogrepl.RelationMessageV2:
		r, err := st.s.loadRelation(ctx, st.pool, &m.RelationMessage)
		if err != nil {
			return err
		}
		st.rels[m.RelationID] = r
	case *pglogrepl.BeginMessage:
		st.cur = st.prog.open()
		st.at = txnInfo{commitLSN: uint64(m.FinalLSN), xid: m.Xid, commitTime: m.CommitTime}
	case *pglogrepl.CommitMessage:
		if st.cur == nil {
			return fmt.Errorf("commit at %s without begin", wire.FormatLSN(uint64(m.CommitLSN)))
		}
		if j := st.s.job.Load(); j != nil {
			j.committed(st.at.xid, st.at.commitLSN)
		}
		st.prog.close(st.cur, uint64(m.TransactionEndLSN))
		st.cur = nil
		st.s.met.lastCommit.Set(float64(m.CommitTime.UnixNano()) / 1e9)
	case *pglogrepl.LogicalDecodingMessageV2:
		st.watermark(ctx, m)
	case *pglogrepl.TruncateMessageV2:
		if st.cur == nil {
			return errors.New("truncate outside a transaction")
		}
		for _, id := range m.RelationIDs {
			r, ok := st.rels[id]
			if !ok {
				return fmt.Errorf("truncate of unknown relation %d", id)
			}
			st.at.lsn = walStart
			rec := st.enc.truncate(r, &st.at)
			st.s.produce(ctx, rec, st.cur, st.at.commitLSN)
			r.counter(st.s.met, wire.OpTruncate).Inc()
		}
	}
	return nil
}

func (st *streamState) change(ctx context.Context, walStart uint64, relID uint32, op wire.Op, oldT *pglogrepl.TupleData, oldType uint8, newT *pglogrepl.TupleData) error {
	r, ok := st.rels[relID]
	if !ok {
		return fmt.Errorf("change for unknown relation %d at %s", relID, wire.FormatLSN(walStart))
	}
	if st.cur == nil {
		return fmt.Errorf("table %s.%s: change at %s outside a transaction", r.schema, r.table, wire.FormatLSN(walStart))
	}
	st.at.lsn = walStart
	recs, err := st.enc.change(r, op, oldT, oldType, newT, &st.at)
	if err != nil {
		// A row that cannot be encoded goes to the dead-letter topic; the
		// stream goes on.
		key, value := wire.DeadLetter{Stage: wire.StageStream, Table: r.schema + "." + r.table, LSN: wire.FormatLSN(walStart), Reason: err.Error()}.Encode()
		rec := record{topic: wire.DLQTopic(st.s.cfg.TopicPrefix), key: key, value: value, op: op}
		st.s.met.dlq.Inc()
		st.s.log.Error("row change cannot be encoded; written to the dead-letter topic", "table", r.schema+"."+r.table, "lsn", wire.FormatLSN(walStart), "err", err)
		st.s.produce(ctx, rec, st.cur, st.at.commitLSN)
		return nil
	}
	for _, rec := range recs {
		st.s.produce(ctx, rec, st.cur, st.at.commitLSN)
	}
	r.counter(st.s.met, op).Inc()
	return nil
}

// heartbeat keeps an idle slot moving and samples slot lag. On a hot
// standby (16+) lag is measured from the replayed WAL, and there is no
// heartbeat: a standby cannot write WAL; the primary's activity (or its
// pg_log_standby_snapshot()) moves the slot.
func (s *Streamer) heartbeat(ctx context.Context, pool *pgxpool.Pool) {
	tick := time.NewTicker(max(s.cfg.HeartbeatInterval/2, time.Second))
	defer tick.Stop()
	warned, standbyLogged := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var lag *int64
		var standby bool
		if err := pool.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END - confirmed_flush_lsn)::int8, pg_is_in_recovery()
FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Slot).Scan(&lag, &standby); err == nil && lag != nil {
			s.met.slotLag.Set(float64(*lag))
		}
		if standby && s.cfg.HeartbeatInterval > 0 && !standbyLogged {
			s.log.Info("streaming from a hot standby: no heartbeat (a standby cannot write WAL); the primary's activity moves the slot")
			standbyLogged = true
		}
		if standby || s.cfg.HeartbeatInterval <= 0 || time.Since(time.Unix(0, s.lastMsg.Load())) < s.cfg.HeartbeatInterval {
			continue
		}
		if _, err := pool.Exec(ctx, `SELECT pg_logical_emit_message(false, 'decant.heartbeat', '')`); err != nil && ctx.Err() == nil && !warned {
			s.log.Warn("heartbeat failed; an idle slot then advances only through keepalives", "err", err)
			warned = true
		}
	}
}

// replicationError classifies an error the walsender sent. A publication
// dropped while streaming is permanent: pgoutput looks the publication up
// as of each change, so the changes committed while it was missing can
// never be decoded through this slot, even once it is recreated
// (PostgreSQL 15; e2e/badinput TestPublicationDropped). The slot was not
// confirmed past them.
func (s *Streamer) replicationError(pgErr *pgconn.PgError) error {
	if pgErr.Code == "42704" && strings.HasPrefix(pgErr.Message, "publication ") {
		return permanent(fmt.Errorf("publication %q was dropped while decant streamed from slot %s (%s): PostgreSQL cannot decode the changes committed while it was missing, even once it is recreated, so retrying cannot help; nothing after the last change written to Kafka was confirmed. To recover, drop the slot: SELECT pg_drop_replication_slot('%s'); then start decant again: it recreates the publication (postgres.create_publication; otherwise create it first, decant check prints the statement) and takes a new snapshot of every published table",
			s.cfg.Publication, s.cfg.Slot, pgErr.Message, s.cfg.Slot))
	}
	return fmt.Errorf("replication stream: %w", pgErr)
}
