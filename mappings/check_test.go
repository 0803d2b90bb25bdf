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

// TestCheckStandby: postgres.dsn may be a hot standby (issue 16): decant
// check refuses one before PostgreSQL 16, requires hot_standby_feedback,
// warns without a physical slot to the primary, and cannot leave a missing
// publication for decant to create (a standby is read-only).
func TestCheckStandby(t *testing.T) {
	cat := testCatalog(t, shopCatalog)
	m := mustBind(t, cat, productExample)
	base := CheckEnv{User: "decant", Replication: true, WALLevel: "logical", Publication: "decant", PublicationExists: true,
		PublicationActions: []string{"delete", "insert", "truncate", "update"}, Slot: "decant"}
	for _, tb := range cat.Tables {
		base.PublicationTables = append(base.PublicationTables, tb.Name)
	}
	for _, tc := range []struct {
		name string
		edit func(*CheckEnv)
		want []string // substrings of the standby problems, in order
	}{
		{"primary", func(e *CheckEnv) { e.ServerVersionNum = 150004 }, nil},
		{"standby of 15", func(e *CheckEnv) { e.ServerVersionNum, e.Standby = 150004, true },
			[]string{"error: postgres.dsn is a standby of PostgreSQL 15.4; logical decoding on a standby needs PostgreSQL 16+"}},
		{"standby of 16, no feedback, no slot", func(e *CheckEnv) { e.ServerVersionNum, e.Standby, e.HotStandbyFeedback = 160010, true, "off" },
			[]string{"error: postgres.dsn is a standby with hot_standby_feedback = off", "warning: postgres.dsn is a standby without primary_slot_name"}},
		{"standby of 18, set up", func(e *CheckEnv) {
			e.ServerVersionNum, e.Standby, e.HotStandbyFeedback, e.PrimarySlotName = 180006, true, "on", "decant_standby"
		}, nil},
		{"standby without the publication", func(e *CheckEnv) {
			e.ServerVersionNum, e.Standby, e.HotStandbyFeedback, e.PrimarySlotName = 170006, true, "on", "decant_standby"
			e.PublicationExists, e.CreatePublication = false, true
		}, []string{"error: publication decant does not exist, and postgres.dsn is a standby, where decant cannot create it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base
			tc.edit(&env)
			var got []string
			for _, p := range Check(m, cat, env) {
				s := p.String()
				if strings.Contains(s, "standby") || strings.Contains(s, "publication decant does not exist") {
					got = append(got, s)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("standby problems:\n%s\nwant %d: %q", strings.Join(got, "\n"), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// A mapped table outside the publication (issue 18): an error naming the
// ALTER PUBLICATION when decant may not change the publication (or the
// DSN is a standby, where it cannot), a warning when decant run adds it
// and snapshots it online.
func TestCheckTableOutsidePublication(t *testing.T) {
	cat := testCatalog(t, shopCatalog)
	m := mustBind(t, cat, productExample)
	base := CheckEnv{User: "decant", Replication: true, WALLevel: "logical", Publication: "decant", PublicationExists: true,
		PublicationActions: []string{"delete", "insert", "truncate", "update"}, Slot: "decant", ServerVersionNum: 150004}
	var left TableName
	for _, tb := range cat.Tables {
		if tb.Name.Name == "products" {
			left = tb.Name
			continue
		}
		base.PublicationTables = append(base.PublicationTables, tb.Name)
	}
	for _, tc := range []struct {
		name   string
		create bool
		edit   func(*CheckEnv)
		want   string
	}{
		{"create_publication false", false, func(*CheckEnv) {}, "error: "},
		{"create_publication true", true, func(*CheckEnv) {}, "warning: "},
		{"a standby", true, func(e *CheckEnv) {
			e.Standby, e.HotStandbyFeedback, e.PrimarySlotName, e.ServerVersionNum = true, "on", "s", 160010
		}, "error: "},
	} {
		env := base
		env.CreatePublication = tc.create
		tc.edit(&env)
		var got []Problem
		for _, p := range Check(m, cat, env) {
			if p.Table == left.String() && strings.Contains(p.Message, "is not in publication decant") {
				got = append(got, p)
			}
		}
		if len(got) != 1 || !strings.HasPrefix(got[0].String(), tc.want) || !strings.Contains(got[0].Fix, `ALTER PUBLICATION "decant" ADD TABLE "public"."products";`) {
			t.Errorf("%s: %v, want one %sproblem with the ALTER PUBLICATION", tc.name, got, tc.want)
		}
	}
}
