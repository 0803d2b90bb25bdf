package resolver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// endOffsets returns the end offset of every partition of topic that has
// records (end > start); a topic that does not exist has none.
func endOffsets(ctx context.Context, adm *kadm.Client, topic string) (map[int32]int64, error) {
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", topic, err)
	}
	ends, err := allEndOffsets(ctx, adm, topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	for p, end := range ends {
		if s, ok := starts.Lookup(topic, p); !ok || s.Err != nil || end <= s.Offset {
			delete(ends, p)
		}
	}
	return ends, nil
}

// scanKeys calls fn with the key of every non-tombstone record of topic up
// to the end offsets it has when the scan starts. It reads with its own
// client (no group) and holds one fetch in memory.
func scanKeys(ctx context.Context, opts []kgo.Opt, topic string, fn func(key []byte) error) error {
	adm0, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	ends, err := endOffsets(ctx, kadm.NewClient(adm0), topic)
	adm0.Close()
	if err != nil || len(ends) == 0 {
		return err
	}
	parts := map[int32]kgo.Offset{}
	for p := range ends {
		parts[p] = kgo.NewOffset().AtStart()
	}
	cl, err := kgo.NewClient(append(append(wire.CommittedReader(), opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	for len(ends) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil {
				ferr = fmt.Errorf("read %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		var cbErr error
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := ends[r.Partition]
			if !ok || cbErr != nil {
				return
			}
			if r.Offset < end && r.Value != nil && !r.Attrs.IsControl() {
				cbErr = fn(r.Key)
			}
			// Reading committed records, the one at end-1 may never come:
			// when the end offset was taken inside a transaction that then
			// aborted, its records are skipped and the first record seen
			// is the abort marker, at end or after. Any record at end-1 or
			// later means the partition is read (waiting for one exactly
			// at end-1 hung the map stage in a chaos run).
			if r.Offset+1 >= end {
				delete(ends, r.Partition)
			}
		})
		if cbErr != nil {
			return cbErr
		}
	}
	return nil
}

// rootlessBatch is how many ids rootless checks per statement.
const rootlessBatch = 5_000

// rootless passes on the ids added to it that have no document in tx's
// snapshot: no root row, or one the root's filter leaves out (a.Roots).
// An id that cannot be parsed is passed on: the build stage says why.
// Call flush after the last add.
type rootless struct {
	ctx     context.Context
	tx      pgx.Tx
	a       *mappings.Aggregate
	produce func(key []byte) error
	keys    [][]byte
}

func (r *rootless) add(key []byte) error {
	r.keys = append(r.keys, bytes.Clone(key))
	if len(r.keys) < rootlessBatch {
		return nil
	}
	return r.flush()
}

func (r *rootless) flush() error {
	keys := r.keys
	r.keys = r.keys[:0]
	if len(keys) == 0 {
		return nil
	}
	canon := make([]string, len(keys))
	vals := make([][]json.RawMessage, 0, len(keys))
	for i, k := range keys {
		v, err := parseKey(r.a, k)
		if err != nil {
			continue
		}
		canon[i] = string(idKey(r.a, v))
		vals = append(vals, v)
	}
	have := make(map[string]bool, len(vals))
	if len(vals) > 0 {
		args, err := r.a.Roots.Args(vals)
		if err != nil {
			return fmt.Errorf("aggregate %s: %w", r.a.Name, err)
		}
		rows, err := r.tx.Query(r.ctx, r.a.Roots.SQL, args...)
		if err != nil {
			return fmt.Errorf("aggregate %s: read which ids have a root row: %w", r.a.Name, err)
		}
		n := len(r.a.ID)
		raw := make([]json.RawMessage, n)
		dest := make([]any, n)
		for i := range raw {
			dest[i] = &raw[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return fmt.Errorf("aggregate %s: read which ids have a root row: %w", r.a.Name, err)
			}
			have[string(idKey(r.a, raw))] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("aggregate %s: read which ids have a root row: %w", r.a.Name, err)
		}
	}
	for i, k := range keys {
		if canon[i] != "" && have[canon[i]] {
			continue
		}
		if err := r.produce(k); err != nil {
			return err
		}
	}
	return nil
}
