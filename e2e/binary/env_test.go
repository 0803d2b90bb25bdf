package binary

import (
	"context"
	"os"
	"testing"

	"github.com/decant-cdc/decant/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDecant()
	os.Exit(code)
}

// items are documents with their category (many-to-one through
// items.category_id, so items needs REPLICA IDENTITY FULL).
var items = testenv.PipelineSpec{
	Schema:    testenv.ItemsSchema,
	Aggregate: "item",
	Mapping: `version: 1
schema: public
aggregates:
  item:
    table: items
    columns: [id, name]
    relations:
      category:
        table: categories
        references: category_id
        columns: [title]
    elasticsearch:
      index: %s
      settings: {number_of_shards: 1, number_of_replicas: 0}
`,
	// The expected documents, computed independently of decant's SQL.
	OracleSQL: `
SELECT i.id::text, jsonb_build_object('id', i.id, 'name', i.name,
  'category', CASE WHEN c.id IS NULL THEN NULL ELSE jsonb_build_object('title', c.title) END)
FROM items i LEFT JOIN categories c ON c.id = i.category_id`,
}

// newPipeline is the items pipeline with decant's HTTP port off (tests
// that need it set DECANT_HTTP_LISTEN per process).
func newPipeline(t *testing.T) *testenv.Pipeline { return testenv.NewPipeline(t, items) }

// lsn reads pg_current_wal_lsn().
func lsn(t *testing.T, p *testenv.Pipeline) string {
	var s string
	if err := p.PG.Pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}
