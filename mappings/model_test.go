package mappings

import (
	"strings"
	"testing"
)

// DocumentSQL lists the filters and computed fields in tree order (the
// index hash covers them: issue 18, a changed where: is reindexed).
func TestDocumentSQL(t *testing.T) {
	cat := testCatalog(t, shopCatalog)
	m := mustBind(t, cat, `version: 1
aggregates:
  customer:
    table: customers
    where: "email IS NOT NULL"
    fields:
      order_count: {count: orders}
    relations:
      orders: {table: orders, foreign_key: customer_id, where: "total > 0"}
`)
	got := m.Aggregate("customer").DocumentSQL()
	want := []string{"aggregates.customer.where: email IS NOT NULL", "aggregates.customer.fields.order_count: count(orders)",
		"aggregates.customer.relations.orders.where: total > 0"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("DocumentSQL =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	plain := mustBind(t, cat, "version: 1\naggregates:\n  customer: {table: customers}\n")
	if d := plain.Aggregate("customer").DocumentSQL(); len(d) != 0 {
		t.Fatalf("an aggregate without filters or fields: DocumentSQL = %v, want none", d)
	}
}
