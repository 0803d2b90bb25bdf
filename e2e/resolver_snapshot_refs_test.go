package e2e

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestResolverInitialSnapshotRefsOnce: an initial snapshot of more roots
// than the map stage's per-batch seen-set holds (100,000) gives every root
// exactly one ref. The map stage read the refs topic back for ids that may
// be about to get a document after producing every root id; the refs it
// had just produced were there, and those past the seen-set's bound went
// out twice: an initial load of 200,000 customers built 100,000 of their
// documents twice (bench-peers, 4 Dec 2026).
func TestResolverInitialSnapshotRefsOnce(t *testing.T) {
	n := resSize("DECANT_TEST_SNAPSHOT_ROOTS", 110_000, 250_000)
	e := newResEnv(t, fmt.Sprintf(`
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, %d) g;`, n), `version: 1
aggregates:
  item: {table: items, elasticsearch: {index: IDX_item}}
`)
	refs := e.snapshotRefs()
	requireOneRefEach(t, refs, n)
}

// TestResolverSecondSnapshotRefsOnce: an initial snapshot over an
// aggregate topic that already holds more documents than the seen-set
// (a slot lost and created again) gives every id one ref too: each root
// the filter keeps from the root ids, each document without one (its root
// filtered out, or gone) from the aggregate topic. Read from both, the ids
// past the seen-set's bound went out twice.
func TestResolverSecondSnapshotRefsOnce(t *testing.T) {
	n := resSize("DECANT_TEST_SNAPSHOT_ROOTS", 110_000, 250_000)
	const gone = 1_000 // documents whose roots no longer exist
	e := newResEnv(t, fmt.Sprintf(`
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL);
INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, %d) g;`, n), `version: 1
aggregates:
  item: {table: items, where: "id % 100 <> 0", elasticsearch: {index: IDX_item}}
`)
	// The documents of an earlier run: one for every root and for every
	// id past them.
	ctx := testenv.Ctx(t)
	docs := make([]wire.Document, 0, 10_000)
	for id := 1; id <= n+gone; id++ {
		key := fmt.Appendf(nil, `{"id":%d}`, id)
		docs = append(docs, wire.Document{Aggregate: "item", ID: key, Version: 1,
			Doc: []byte(`{"id":` + strconv.Itoa(id) + `,"name":"earlier"}`)})
		if len(docs) == cap(docs) || id == n+gone {
			if err := e.kafka.Write(ctx, docs); err != nil {
				t.Fatal(err)
			}
			docs = docs[:0]
		}
	}
	refs := e.snapshotRefs()
	requireOneRefEach(t, refs, n+gone)
}

// snapshotRefs starts the streamer and the map stage, waits until the map
// stage has committed every row of the initial snapshot, stops them and
// returns the keys of the refs topic's records, in order.
func (e *resEnv) snapshotRefs() [][]byte {
	e.t.Helper()
	e.startStreamer()
	e.startMapper("map")
	ctx := testenv.Ctx(e.t)
	e.waitSnapshot(3 * time.Minute)
	raw, refs := e.topics()
	testenv.WaitFor(e.t, "the map stage to commit every snapshot row", 3*time.Minute, func() (bool, error) {
		lag, err := testenv.GroupLag(ctx, e.k.Admin, e.k.Prefix+".map", raw...)
		return err == nil && lag == 0, fmt.Errorf("lag %d (%v)", lag, err)
	})
	e.stopAll()
	var keys [][]byte
	for _, r := range e.k.Records(e.t, refs[0]) {
		if !r.Attrs.IsControl() {
			keys = append(keys, r.Key)
		}
	}
	return keys
}

// requireOneRefEach fails unless keys hold {"id":i} exactly once for each
// i in 1..n and nothing else.
func requireOneRefEach(t *testing.T, keys [][]byte, n int) {
	t.Helper()
	seen := map[string]int{}
	dups := 0
	for _, k := range keys {
		seen[string(k)]++
		if seen[string(k)] == 2 {
			dups++
		}
	}
	missing := 0
	for id := 1; id <= n; id++ {
		if seen[fmt.Sprintf(`{"id":%d}`, id)] == 0 {
			missing++
		}
	}
	if len(seen) != n || dups > 0 || missing > 0 {
		t.Fatalf("refs: %d distinct ids, %d of them more than once, %d ids missing; want each of the %d ids once", len(seen), dups, missing, n)
	}
}
