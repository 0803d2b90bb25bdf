package resolver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// BackfillOptions tune Backfill.
type BackfillOptions struct {
	// Progress, when set, is called after every page of ids with the number
	// enqueued so far and the estimated total (pg_class.reltuples, or
	// count(*) when the table was never analyzed).
	Progress func(done, total int64)
	// PageSize is how many ids one keyset query reads. Default: 10000.
	PageSize int
	// Index is copied into every ref (a reindex building into one concrete
	// index). Default: "" (every sink).
	Index string
}

// Backfilled says what a Backfill enqueued and where the refs topic ended
// afterwards: once the build stage's group has committed Ends, every
// document is written (WaitBuilt).
type Backfilled struct {
	Aggregate string
	Count     int64
	// Starts and Ends are the refs topic's end offsets per partition
	// before the first ref and after the last was acknowledged.
	Starts, Ends map[int32]int64
}

// Backfill enqueues a ref for every root id of aggregate into its refs
// topic (Ref.Backfill = true, no xid), reading ids with keyset pagination
// and producing them as they come, with bounded memory. It returns once
// Kafka has acknowledged every ref. The build stage (in this process or
// another) then builds them; WaitBuilt waits for that.
func Backfill(ctx context.Context, cfg Config, db *pgxpool.Pool, model *mappings.Model, aggregate string, opts BackfillOptions) (*Backfilled, error) {
	cfg.defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	a := model.Aggregate(aggregate)
	if a == nil {
		return nil, fmt.Errorf("resolver: no aggregate %q in the mappings", aggregate)
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 10_000
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, cfg.Kafka...), producerOpts(cfg.MaxBufferedRefs)...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := wire.RefsTopic(cfg.TopicPrefix, a.Name)
	if err := ensureRefsTopic(ctx, adm, &cfg, topic); err != nil {
		return nil, err
	}
	res := &Backfilled{Aggregate: a.Name}
	// A topic ensureTopic just created may be unknown to the broker that
	// answers for a moment: retry that error for up to 30s.
	for deadline := time.Now().Add(30 * time.Second); ; {
		res.Starts, err = allEndOffsets(ctx, adm, topic)
		if err == nil || !errors.Is(err, kerr.UnknownTopicOrPartition) || time.Now().After(deadline) {
			break
		}
		if !ctxtime.Sleep(ctx, 100*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	total, err := estimateRows(ctx, db, a.Table)
	if err != nil {
		return nil, err
	}
	value, err := json.Marshal(wire.Ref{Aggregate: a.Name, CommitLSN: wire.FormatLSN(0), Backfill: true, Index: opts.Index})
	if err != nil {
		return nil, err
	}
	var ack acks
	err = rootIDs(ctx, db, a, opts.PageSize, func(key []byte) error {
		if err := ack.first(); err != nil {
			return err
		}
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: key, Value: value}, ack.promise)
		res.Count++
		if opts.Progress != nil && res.Count%int64(opts.PageSize) == 0 {
			opts.Progress(res.Count, max(total, res.Count))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, fmt.Errorf("flush refs: %w", err)
	}
	if err := ack.first(); err != nil {
		return nil, err
	}
	if opts.Progress != nil {
		opts.Progress(res.Count, res.Count)
	}
	if res.Ends, err = allEndOffsets(ctx, adm, topic); err != nil {
		return nil, err
	}
	return res, nil
}

// WaitBuilt blocks until the build stage's consumer group has committed
// the refs topic up to b.Ends — that is, until every document the
// backfill asked for has been accepted by the sinks. It works across
// processes: it only reads committed offsets. progress, when set, gets
// the refs built so far and the refs to build (counted from b.Starts).
func WaitBuilt(ctx context.Context, cfg Config, b *Backfilled, progress func(done, total int64)) error {
	cfg.defaults()
	cl, err := kgo.NewClient(cfg.Kafka...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topic := wire.RefsTopic(cfg.TopicPrefix, b.Aggregate)
	group := cfg.Group + ".build"
	var total int64
	for p, end := range b.Ends {
		total += end - b.Starts[p]
	}
	retry := 50 * time.Millisecond
	for {
		offs, err := adm.FetchOffsetsForTopics(ctx, group, topic)
		if err != nil {
			// A coordinator that is loading or moving answers with a
			// retriable error (COORDINATOR_NOT_AVAILABLE from a broker
			// just started); the wait goes on after a backoff.
			if !kerr.IsRetriable(err) {
				return fmt.Errorf("fetch committed offsets of group %s: %w", group, err)
			}
			if !ctxtime.Sleep(ctx, retry) {
				return ctx.Err()
			}
			retry = min(2*retry, 2*time.Second)
			continue
		}
		retry = 50 * time.Millisecond
		var done int64
		complete := true
		for p, end := range b.Ends {
			if end <= b.Starts[p] {
				// Nothing enqueued there. Regression: a partition that never
				// held a ref has no committed offset (-1 < 0), and WaitBuilt
				// waited for it forever (a backfill of 2 ids on 2 partitions,
				// e2e/badinput TestOversizedRawEvent).
				continue
			}
			committed := int64(-1)
			if o, ok := offs.Lookup(topic, p); ok && o.Err == nil {
				committed = o.At
			}
			if committed < end {
				complete = false
			}
			done += max(0, min(committed, end)-b.Starts[p])
		}
		if progress != nil {
			progress(done, total)
		}
		if complete {
			return nil
		}
		// A committed-offsets fetch is one small request; every poll's
		// pause is a delay of the command's return, so the last tenth of
		// the work is polled five times as often.
		pause := 50 * time.Millisecond
		if 10*done >= 9*total {
			pause = 10 * time.Millisecond
		}
		if !ctxtime.Sleep(ctx, pause) {
			return ctx.Err()
		}
	}
}

// NeedsBackfill reports whether aggregate has no documents yet: its
// aggregate topic is missing or empty. `decant run` backfills such
// aggregates on start.
func NeedsBackfill(ctx context.Context, cfg Config, aggregate string) (bool, error) {
	cfg.defaults()
	cl, err := kgo.NewClient(cfg.Kafka...)
	if err != nil {
		return false, fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	ends, err := endOffsets(ctx, kadm.NewClient(cl), wire.AggTopic(cfg.TopicPrefix, aggregate))
	if err != nil {
		return false, err
	}
	return len(ends) == 0, nil
}

// allEndOffsets returns the end offset of every partition of topic.
func allEndOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", topic, err)
	}
	out := map[int32]int64{}
	var lerr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = errors.Join(lerr, fmt.Errorf("end offset of %s/%d: %w", topic, o.Partition, o.Err))
			return
		}
		out[o.Partition] = o.Offset
	})
	return out, lerr
}

// estimateRows estimates the rows of a table from the planner statistics,
// counting them when the table was never analyzed.
func estimateRows(ctx context.Context, db *pgxpool.Pool, t mappings.TableName) (int64, error) {
	var n float64
	if err := db.QueryRow(ctx, `SELECT reltuples::float8 FROM pg_class WHERE oid = $1::regclass`, t.Sanitize()).Scan(&n); err != nil {
		return 0, fmt.Errorf("estimate rows of %s: %w", t, err)
	}
	if n >= 0 {
		return int64(n), nil
	}
	var c int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM `+t.Sanitize()).Scan(&c); err != nil {
		return 0, fmt.Errorf("count rows of %s: %w", t, err)
	}
	return c, nil
}

// rootIDs calls fn with the key of every row of a's root table, in id
// order, reading pageSize rows per statement (keyset pagination on the id
// columns): memory stays bounded whatever the table size.
func rootIDs(ctx context.Context, db mappings.Querier, a *mappings.Aggregate, pageSize int, fn func(key []byte) error) error {
	n := len(a.ID)
	cols := make([]string, n)
	sel := make([]string, 0, 2*n)
	// Columns are qualified with the table alias r: the output column of
	// "id"::text is named id too, and an unqualified ORDER BY "id" would
	// sort by that text ("10" before "9") while the keyset condition
	// compares the typed column, skipping ids past the first page.
	for i, c := range a.ID {
		cols[i] = "r." + pgx.Identifier{c}.Sanitize()
		sel = append(sel, "to_jsonb("+cols[i]+")")
	}
	for i := range a.ID {
		sel = append(sel, cols[i]+"::text")
	}
	params := make([]string, n)
	for i, t := range a.IDTypes {
		params[i] = fmt.Sprintf("$%d::text::%s", i+1, t)
	}
	base := fmt.Sprintf("SELECT %s FROM %s AS r", strings.Join(sel, ", "), a.Table.Sanitize())
	// Only the roots the mapping's filter keeps have documents.
	filter, and := "", " WHERE "
	if a.Root.Where != "" {
		filter, and = " WHERE ("+a.Root.Where+")", " AND "
	}
	order := fmt.Sprintf(" ORDER BY %s LIMIT %d", strings.Join(cols, ", "), pageSize)
	first := base + filter + order
	next := fmt.Sprintf("%s%s%s(%s) > (%s)%s", base, filter, and, strings.Join(cols, ", "), strings.Join(params, ", "), order)
	var cursor []any
	for {
		sql, args := first, []any(nil)
		if cursor != nil {
			sql, args = next, cursor
		}
		rows, err := db.Query(ctx, sql, args...)
		if err != nil {
			return fmt.Errorf("aggregate %s: read ids of %s: %w", a.Name, a.Table, err)
		}
		count := 0
		vals := make([][]byte, n)
		texts := make([]string, n)
		dest := make([]any, 2*n)
		for i := range n {
			dest[i] = &vals[i]
			dest[n+i] = &texts[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return fmt.Errorf("aggregate %s: read ids of %s: %w", a.Name, a.Table, err)
			}
			count++
			raw := make([]json.RawMessage, n)
			for i := range n {
				raw[i] = append(json.RawMessage(nil), vals[i]...)
			}
			if err := fn(idKey(a, raw)); err != nil {
				rows.Close()
				return err
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("aggregate %s: read ids of %s: %w", a.Name, a.Table, err)
		}
		if count < pageSize {
			return nil
		}
		cursor = make([]any, n)
		for i := range n {
			cursor[i] = texts[i]
		}
	}
}
