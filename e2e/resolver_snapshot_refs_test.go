package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
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
	e.startStreamer()
	e.startMapper("map")
	ctx := testenv.Ctx(t)
	e.waitSnapshot(3 * time.Minute)
	raw, refs := e.topics()
	testenv.WaitFor(t, "the map stage to commit every snapshot row", 3*time.Minute, func() (bool, error) {
		lag, err := testenv.GroupLag(ctx, e.k.Admin, e.k.Prefix+".map", raw...)
		return err == nil && lag == 0, fmt.Errorf("lag %d (%v)", lag, err)
	})
	e.stopAll()

	seen := map[string]int{}
	dups := 0
	for _, r := range e.k.Records(t, refs[0]) {
		if r.Attrs.IsControl() {
			continue
		}
		seen[string(r.Key)]++
		if seen[string(r.Key)] == 2 {
			dups++
		}
	}
	if len(seen) != n || dups > 0 {
		t.Fatalf("refs topic %s: %d distinct ids, %d of them more than once; want each of the %d roots once", refs[0], len(seen), dups, n)
	}
}
