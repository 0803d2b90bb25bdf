package streamer

import (
	"reflect"
	"testing"

	"github.com/jackc/pglogrepl"
)

// TestPublishedColumns: the snapshot emits a row with the columns pgoutput
// sends for it. Regression test: the snapshot used to drop every generated
// column and keep every other one, so on PostgreSQL 18 a stored generated
// column published with publish_generated_columns = stored was in "c"
// records but not in "r" records, and a publication's column list (15+)
// left columns in "r" records that "c" records lacked.
func TestPublishedColumns(t *testing.T) {
	cols := []pglogrepl.RelationMessageColumn{{Name: "id"}, {Name: "a"}, {Name: "s"}, {Name: "v"}, {Name: "b"}}
	gen := map[string]bool{"s": true, "v": true}
	names := func(cs []pglogrepl.RelationMessageColumn) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		published  []string
		gen18      bool
		keep, drop []string
	}{
		{"13/14: no attnames, generated columns dropped", nil, false, []string{"id", "a", "b"}, []string{"s", "v"}},
		{"15: attnames lists generated columns pgoutput does not send", []string{"id", "a", "s", "b"}, false, []string{"id", "a", "b"}, []string{"s", "v"}},
		{"16, 17: publication of every column", []string{"id", "a", "b"}, false, []string{"id", "a", "b"}, []string{"s", "v"}},
		{"15+: column list", []string{"id", "b"}, false, []string{"id", "b"}, []string{"a", "s", "v"}},
		{"18: publish_generated_columns = none", []string{"id", "a", "b"}, true, []string{"id", "a", "b"}, []string{"s", "v"}},
		{"18: publish_generated_columns = stored", []string{"id", "a", "s", "b"}, true, []string{"id", "a", "s", "b"}, []string{"v"}},
		{"18: attnames order does not matter: attnum order", []string{"b", "s", "id"}, true, []string{"id", "s", "b"}, []string{"a", "v"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keep, drop := publishedColumns(cols, gen, tc.published, tc.gen18)
			if got := names(keep); !reflect.DeepEqual(got, tc.keep) {
				t.Errorf("kept %v, want %v", got, tc.keep)
			}
			if !reflect.DeepEqual(drop, tc.drop) {
				t.Errorf("dropped %v, want %v", drop, tc.drop)
			}
		})
	}
}
