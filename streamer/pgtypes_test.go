package streamer

import (
	"context"
	"reflect"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestTypesLoad checks what load reads from the catalog for user-defined
// types, and that it asks only for types it does not have.
func TestTypesLoad(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx := testenv.Ctx(t)
	pg.Exec(t, encAllTypesSQL(t))

	oid := func(name string) uint32 {
		var o uint32
		if err := pg.Pool.QueryRow(ctx, "SELECT $1::regtype::oid", name).Scan(&o); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return o
	}
	q := &encCountingQuerier{db: pg.Pool}
	types := newPGTypes()
	// person refers to address, mood[] and mood; the domains to their bases.
	if err := types.load(ctx, q, oid("person[]"), oid("amount2"), oid("int_list"), oid("doc"), oid("posint"), 23, 0, 999999999); err != nil {
		t.Fatal(err)
	}
	if q.n == 0 || q.n > 4 {
		t.Errorf("Load ran %d queries, want 1 to 4", q.n)
	}

	get := func(name string) *pgType {
		t.Helper()
		ti, ok := types.get(oid(name))
		if !ok {
			t.Fatalf("%s not loaded", name)
		}
		return ti
	}
	if ti := get("person[]"); ti.Kind != kindArray || ti.Elem != oid("person") || ti.Delim != ',' || ti.Name != "person[]" {
		t.Errorf("person[] = %+v", ti)
	}
	person := get("person")
	want := []typeField{{"name", 25}, {"home", oid("address")}, {"moods", oid("mood[]")}, {"extra", 3802}, {"born", 1082}, {"Ünïcode ключ", 25}, {"a", 23}}
	if person.Kind != kindComposite || !reflect.DeepEqual(person.Fields, want) {
		t.Errorf("person = %+v, want fields %v", person, want)
	}
	address := get("address")
	if len(address.Fields) != 5 || address.Fields[1].Name != "zip code" || address.Fields[1].OID != 1043 {
		t.Errorf("address (with a dropped attribute) = %+v", address)
	}
	if ti := get("mood"); ti.Kind != kindString || ti.Name != "mood" {
		t.Errorf("mood = %+v", ti)
	}
	if ti := get("mood[]"); ti.Kind != kindArray || ti.Elem != oid("mood") {
		t.Errorf("mood[] = %+v", ti)
	}
	if ti := get("amount2"); ti.Kind != kindNumber || ti.Name != "amount2" {
		t.Errorf("amount2 (domain over domain over numeric) = %+v", ti)
	}
	if ti := get("int_list"); ti.Kind != kindArray || ti.Elem != 23 {
		t.Errorf("int_list (domain over integer[]) = %+v", ti)
	}
	if ti := get("doc"); ti.Kind != kindJSONB {
		t.Errorf("doc (domain over jsonb) = %+v", ti)
	}
	if _, ok := types.get(999999999); ok {
		t.Errorf("a type that does not exist was cached")
	}

	// Everything is cached now: no query.
	q.n = 0
	if err := types.load(ctx, q, oid("person"), oid("address"), oid("mood"), 25); err != nil {
		t.Fatal(err)
	}
	if q.n != 0 {
		t.Errorf("Load of cached types ran %d queries", q.n)
	}

	// The encoder uses what load found.
	got, err := types.encodeValue(nil, oid("person"), []byte(`(Ann,"(""Elm St"",999,2,{},)",{happy},"{""k"": ""v""}",1990-05-17,ü,1)`))
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"a":1,"born":"1990-05-17","home":{"n":2,"tags":[],"since":null,"street":"Elm St","zip code":"999"},"name":"Ann","extra":{"k":"v"},"moods":["happy"],"Ünïcode ключ":"ü"}`
	if string(got) != wantJSON {
		t.Errorf("person:\n got  %s\n want %s", got, wantJSON)
	}
}

type encCountingQuerier struct {
	db querier
	n  int
}

func (q *encCountingQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	q.n++
	return q.db.Query(ctx, sql, args...)
}

func TestNewTypes(t *testing.T) {
	types := newPGTypes()
	for _, c := range []struct {
		oid   uint32
		name  string
		kind  typeKind
		elem  uint32
		delim byte
	}{
		{16, "boolean", kindBool, 0, ','},
		{20, "bigint", kindNumber, 0, ','},
		{701, "double precision", kindNumber, 0, ','},
		{1700, "numeric", kindNumber, 0, ','},
		{25, "text", kindString, 0, ','},
		{26, "oid", kindString, 0, ','},
		{790, "money", kindString, 0, ','},
		{114, "json", kindJSON, 0, ','},
		{3802, "jsonb", kindJSONB, 0, ','},
		{1082, "date", kindDate, 0, ','},
		{1083, "time without time zone", kindString, 0, ','},
		{1114, "timestamp without time zone", kindTimestamp, 0, ','},
		{1184, "timestamp with time zone", kindTimestampTZ, 0, ','},
		{22, "int2vector", kindVector, 21, ','},
		{30, "oidvector", kindVector, 26, ','},
		{1007, "integer[]", kindArray, 23, ','},
		{1185, "timestamp with time zone[]", kindArray, 1184, ','},
		{1020, "box[]", kindArray, 603, ';'},
		{3807, "jsonb[]", kindArray, 3802, ','},
		{6150, "int4multirange[]", kindArray, 4451, ','},
	} {
		ti, ok := types.get(c.oid)
		if !ok {
			t.Errorf("type %d (%s) missing", c.oid, c.name)
			continue
		}
		if ti.OID != c.oid || ti.Name != c.name || ti.Kind != c.kind || ti.Elem != c.elem || ti.Delim != c.delim {
			t.Errorf("type %d = %+v, want %s %s elem %d delim %q", c.oid, ti, c.name, c.kind, c.elem, c.delim)
		}
	}
	if _, ok := types.get(16384); ok {
		t.Errorf("a user type OID is known without Load")
	}
}

// Composite keys come out in jsonb's order: shorter keys first, then
// bytewise (so multi-byte names sort by their byte length).
func TestTypesCompositeKeyOrder(t *testing.T) {
	types := newPGTypes()
	types.put(&pgType{OID: 90100, Kind: kindComposite, Fields: []typeField{{"zeta", 23}, {"Ünï", 23}, {"b", 23}, {"a", 23}, {"bb", 23}, {"B", 23}}})
	got, err := types.encodeValue(nil, 90100, []byte("(1,2,3,4,5,6)"))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"B":6,"a":4,"b":3,"bb":5,"zeta":1,"Ünï":2}`; string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestTypeKindString(t *testing.T) {
	if kindTimestampTZ.String() != "timestamptz" || typeKind(200).String() != "TypeKind(200)" {
		t.Errorf("TypeKind.String: %s %s", kindTimestampTZ, typeKind(200))
	}
}

// Readers never lock: encoding runs while types are added (run with -race).
func TestTypesConcurrent(t *testing.T) {
	types := newPGTypes()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 0, 64)
			for i := range 1000 {
				if g == 0 {
					types.put(&pgType{OID: uint32(100000 + i), Kind: kindComposite, Fields: []typeField{{"a", 23}}})
					continue
				}
				out, err := types.encodeValue(buf[:0], uint32(100000+i), []byte("(1)"))
				if err != nil || (string(out) != `{"a":1}` && string(out) != `"(1)"`) {
					t.Errorf("got %s, %v", out, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
