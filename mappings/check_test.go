package mappings

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckPure(t *testing.T) {
	cat := testCatalog(t, shopCatalog)
	m := mustBind(t, cat, productExample)
	all := func() map[TableName]bool {
		s := map[TableName]bool{}
		for _, tb := range cat.Tables {
			s[tb.Name] = true
		}
		return s
	}
	good := CheckEnv{User: "decant", Replication: true, WALLevel: "logical", Publication: "decant", PublicationExists: true,
		PublicationActions: []string{"delete", "insert", "truncate", "update"}, Slot: "decant", CanSelect: all()}
	for _, tb := range cat.Tables {
		good.PublicationTables = append(good.PublicationTables, tb.Name)
	}

	// Default replica identities: orders, order_lines and customer_tags
	// (its key includes both columns, so it is fine) are checked.
	ps := Check(m, cat, good)
	var got []string
	for _, p := range ps {
		got = append(got, p.String())
	}
	golden(t, "check/default-identity.txt", []byte(strings.Join(got, "\n")+"\n"))
	for _, tn := range []string{"orders", "order_lines"} {
		cat.Table(TableName{"public", tn}).IdentityColumns = cat.Table(TableName{"public", tn}).columnNames()
	}
	for _, p := range Check(m, cat, good) {
		if p.Severity == SeverityError {
			t.Errorf("unexpected error: %s", p)
		}
	}

	bad := good
	bad.WALLevel, bad.Replication, bad.PublicationExists, bad.CanSelect = "replica", false, false, map[TableName]bool{}
	bad.SlotExists, bad.SlotPlugin = true, "wal2json"
	got = nil
	for _, p := range Check(m, cat, bad) {
		got = append(got, p.String())
	}
	golden(t, "check/bad-env.txt", []byte(strings.Join(got, "\n")+"\n"))
}

func TestBindProblems(t *testing.T) {
	_, err := Load([]File{{Name: "x.yaml", Data: []byte("version: 1\naggregates:\n  a: {tabel: x}\n")}})
	ps := BindProblems(err)
	if len(ps) != 2 || ps[0].Where != "x.yaml:3:3" || ps[1].Where != "x.yaml:3:7" {
		t.Errorf("%+v", ps)
	}
	if ps := BindProblems(errors.New("boom")); len(ps) != 1 || ps[0].Message != "boom" {
		t.Errorf("%+v", ps)
	}
}
