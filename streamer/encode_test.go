package streamer

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/jackc/pglogrepl"
)

// OIDs of the test types below (user types get OIDs from 16384).
const (
	encOIDC1       = 90001 // (zeta int, a text, bb timestamptz, d date[], e json)
	encOIDC1Array  = 90002
	encOIDOuter    = 90003 // (id int8, "in" c1, list c1[], "x y" bool)
	encOIDDomain   = 90004 // domain over numeric
	encOIDDomArr   = 90005 // domain over int4[]
	encOIDEnum     = 90006
	encOIDEnumArr  = 90007
	encOIDEmpty    = 90008 // composite with no attributes
	encOIDBadArray = 90009 // array of an element type that is not cached
	encOIDHstore   = 90010
	encOIDGeometry = 90011 // a type with a cast to json
)

// encTestTypes are the built-in types plus user types like those load finds.
func encTestTypes() *pgTypes {
	t := newPGTypes()
	t.put(
		&pgType{OID: encOIDC1, Name: "c1", Kind: kindComposite, Fields: []typeField{{"zeta", 23}, {"a", 25}, {"bb", 1184}, {"d", 1182}, {"e", 114}}},
		&pgType{OID: encOIDC1Array, Name: "c1[]", Kind: kindArray, Elem: encOIDC1, Delim: ','},
		&pgType{OID: encOIDOuter, Name: "outer", Kind: kindComposite, Fields: []typeField{{"id", 20}, {"in", encOIDC1}, {"list", encOIDC1Array}, {"x y", 16}}},
		&pgType{OID: encOIDDomain, Name: "amount", Kind: kindNumber},
		&pgType{OID: encOIDDomArr, Name: "int_list", Kind: kindArray, Elem: 23, Delim: ','},
		&pgType{OID: encOIDEnum, Name: "mood", Kind: kindString},
		&pgType{OID: encOIDEnumArr, Name: "mood[]", Kind: kindArray, Elem: encOIDEnum, Delim: ','},
		&pgType{OID: encOIDEmpty, Name: "empty", Kind: kindComposite},
		&pgType{OID: encOIDBadArray, Name: "x[]", Kind: kindArray, Elem: 12345678, Delim: ','},
		&pgType{OID: encOIDHstore, Name: "hstore", Kind: kindHstore},
		&pgType{OID: encOIDGeometry, Name: "geometry", Kind: kindJSONCast},
	)
	return t
}

// The expected values are what PostgreSQL 15's to_jsonb() gives (with
// TimeZone=UTC, DateStyle=ISO, extra_float_digits=1), compacted.
var encCases = []struct {
	name string
	oid  uint32
	text string
	want string
}{
	// Numbers: to_jsonb reads every number with numeric_in.
	{"int4", 23, `42`, `42`},
	{"int8 beyond float64", 20, `9007199254740993`, `9007199254740993`},
	{"int8 min", 20, `-9223372036854775808`, `-9223372036854775808`},
	{"int2", 21, `-32768`, `-32768`},
	{"numeric keeps scale", 1700, `1.50`, `1.50`},
	{"numeric zero scale", 1700, `0.00`, `0.00`},
	{"numeric 40 digits", 1700, `1234567890123456789012345678901234567890.1234567890`, `1234567890123456789012345678901234567890.1234567890`},
	{"numeric NaN", 1700, `NaN`, `"NaN"`},
	{"numeric Infinity", 1700, `Infinity`, `"Infinity"`},
	{"numeric -Infinity", 1700, `-Infinity`, `"-Infinity"`},
	{"float8 exponent expanded", 701, `1e+100`, `1` + strings.Repeat("0", 100)},
	{"float8 small", 701, `1.5e-10`, `0.00000000015`},
	{"float8 small 2", 701, `1.25e-05`, `0.0000125`},
	{"float8 big", 701, `1.2345678901234568e+17`, `123456789012345680`},
	{"float8 1e15", 701, `1e+15`, `1000000000000000`},
	{"float8 negative zero", 701, `-0`, `0`},
	{"float8 plain", 701, `0.1`, `0.1`},
	{"float8 negative", 701, `-2.5`, `-2.5`},
	{"float8 NaN", 701, `NaN`, `"NaN"`},
	{"float8 Infinity", 701, `Infinity`, `"Infinity"`},
	{"float8 -Infinity", 701, `-Infinity`, `"-Infinity"`},
	{"float8 denormal", 701, `5e-324`, `0.` + strings.Repeat("0", 323) + `5`},
	{"float4 max", 700, `3.4028235e+38`, `340282350000000000000000000000000000000`},
	{"float4 negative exponent", 700, `-1.5e-10`, `-0.00000000015`},
	{"domain over numeric", encOIDDomain, `19.90`, `19.90`},
	{"number with junk is a string", 23, `12abc`, `"12abc"`},
	{"empty number is a string", 23, ``, `""`},

	// Types that look like numbers but to_jsonb has no number rule for.
	{"oid", 26, `4294967295`, `"4294967295"`},
	{"money", 790, `$1,234.56`, `"$1,234.56"`},
	{"xid8", 5069, `12345`, `"12345"`},

	{"bool true", 16, `t`, `true`},
	{"bool false", 16, `f`, `false`},

	// Strings, escaped like escape_json.
	{"text", 25, `hello, world`, `"hello, world"`},
	{"text escapes", 25, "q\" b\\ / \t\n\r\b\f \x01\x1f\x7f é 😀", `"q\" b\\ / \t\n\r\b\f \u0001\u001f` + "\x7f é 😀\""},
	{"text invalid UTF-8", 25, "a\xffb\xc3", `"a\ufffdb\ufffd"`},
	{"bytea", 17, `\x0102ff`, `"\\x0102ff"`},
	{"char(n) keeps padding", 1042, `ab   `, `"ab   "`},
	{"uuid", 2950, `a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11`, `"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"`},
	{"interval", 1186, `1 year 2 mons 3 days 04:05:06.789`, `"1 year 2 mons 3 days 04:05:06.789"`},
	{"time is plain text", 1083, `10:00:01.5`, `"10:00:01.5"`},
	{"timetz keeps +HH", 1266, `10:00:01.5+05:30`, `"10:00:01.5+05:30"`},
	{"timetz +00 unchanged", 1266, `10:00:00+00`, `"10:00:00+00"`},
	{"range", 3910, `["2026-01-01 00:00:00+00","2026-02-01 00:00:00+00")`, `"[\"2026-01-01 00:00:00+00\",\"2026-02-01 00:00:00+00\")"`},
	{"enum", encOIDEnum, `it's "complicated"`, `"it's \"complicated\""`},
	{"unknown type", 4000000000, `{1,2}`, `"{1,2}"`},
	{"point", 600, `(1,2)`, `"(1,2)"`},

	// Dates and timestamps: XSD style.
	{"date", 1082, `2026-11-30`, `"2026-11-30"`},
	{"date BC", 1082, `0044-03-15 BC`, `"0044-03-15 BC"`},
	{"date infinity", 1082, `infinity`, `"infinity"`},
	{"timestamp", 1114, `2026-11-30 10:00:00.123456`, `"2026-11-30T10:00:00.123456"`},
	{"timestamp BC", 1114, `0044-03-15 00:00:00 BC`, `"0044-03-15T00:00:00 BC"`},
	{"timestamp year 10000", 1114, `10000-01-01 00:00:00.5`, `"10000-01-01T00:00:00.5"`},
	{"timestamp -infinity", 1114, `-infinity`, `"-infinity"`},
	{"timestamptz UTC", 1184, `2026-11-30 10:00:00.123456+00`, `"2026-11-30T10:00:00.123456+00:00"`},
	{"timestamptz minutes", 1184, `2026-01-01 15:30:00+05:30`, `"2026-01-01T15:30:00+05:30"`},
	{"timestamptz negative minutes", 1184, `2026-01-01 06:30:00-03:30`, `"2026-01-01T06:30:00-03:30"`},
	{"timestamptz seconds (LMT)", 1184, `1900-03-15 00:00:00+00:19:32`, `"1900-03-15T00:00:00+00:19:32"`},
	{"timestamptz BC", 1184, `0044-03-15 00:00:00+00 BC`, `"0044-03-15T00:00:00+00:00 BC"`},
	{"timestamptz BC with seconds", 1184, `0044-03-15 00:00:00+00:19:32 BC`, `"0044-03-15T00:00:00+00:19:32 BC"`},
	{"timestamptz infinity", 1184, `infinity`, `"infinity"`},
	{"timestamptz max", 1184, `294276-12-31 23:59:59.999999+00`, `"294276-12-31T23:59:59.999999+00:00"`},
	{"timestamptz garbage is a string", 1184, `2026-01-01 "x"`, `"2026-01-01 \"x\""`},

	// json becomes jsonb: keys sorted (length, then bytes), last duplicate
	// kept, numbers through numeric_in; jsonb text is compacted.
	{"json normalized", 114, `{"b":1, "a":2, "a":3, "aa":1.0e2, "c":[1E-2, -0, 0.0, -0.0e-1], "d":"\u00e9\/\u0001\ud83d\ude00"}`, `{"a":3,"b":1,"c":[0.01,0,0.0,0.00],"d":"é/\u0001😀","aa":100}`},
	{"json nested duplicates", 114, `{"a":1, "a":{"x":1,"x":2}}`, `{"a":{"x":2}}`},
	{"json scalar", 114, ` "s" `, `"s"`},
	{"json empty", 114, `{ }`, `{}`},
	{"json literals", 114, `[true,false,null, []]`, `[true,false,null,[]]`},
	{"jsonb", 3802, `{"a": [1, 2.50, "x"], "b": {"c": null}}`, `{"a":[1,2.50,"x"],"b":{"c":null}}`},
	{"jsonb escapes", 3802, `{"k\"": "a\\b\n\u001f"}`, `{"k\"":"a\\b\n\u001f"}`},

	// Arrays: bounds dropped, NULL vs "NULL", quoting, elements by type.
	{"int array", 1007, `{1,2,3}`, `[1,2,3]`},
	{"empty array", 1007, `{}`, `[]`},
	{"array with NULL", 1007, `{1,NULL,3}`, `[1,null,3]`},
	{"array lower bound", 1007, `[0:1]={1,2}`, `[1,2]`},
	{"2-D array with bounds", 1007, `[2:3][0:1]={{1,NULL},{NULL,4}}`, `[[1,null],[null,4]]`},
	{"2-D array", 1007, `{{1,2},{3,4}}`, `[[1,2],[3,4]]`},
	{"3-D array", 1007, `{{{1}},{{2}}}`, `[[[1]],[[2]]]`},
	{"array white space", 1007, ` { 1 , 2 } `, `[1,2]`},
	{"text array quoting", 1009, `{"a b","NULL",NULL,"","q\"\\"," lead","{x}","a,b",spaced,nUlL}`, `["a b","NULL",null,"","q\"\\"," lead","{x}","a,b","spaced",null]`},
	{"text array escaped trailing space", 1009, `{a\ ,b\\}`, `["a ","b\\"]`},
	{"bytea array", 1001, `{"\\x00","\\xdead"}`, `["\\x00","\\xdead"]`},
	{"float array", 1022, `{NaN,Infinity,-Infinity,1e+300,-0}`, `["NaN","Infinity","-Infinity",1` + strings.Repeat("0", 300) + `,0]`},
	{"box array uses ;", 1020, `{(1,1),(0,0);(3,3),(2,2)}`, `["(1,1),(0,0)","(3,3),(2,2)"]`},
	{"timestamptz array", 1185, `{-infinity,"1900-01-01 00:00:00+00","2026-06-30 23:59:59.5+00"}`, `["-infinity","1900-01-01T00:00:00+00:00","2026-06-30T23:59:59.5+00:00"]`},
	{"date array", 1182, `{infinity,-infinity,"0044-03-15 BC"}`, `["infinity","-infinity","0044-03-15 BC"]`},
	{"json array", 199, `{"{\"b\":1,\"a\":2}","[1, 2e2]",NULL,"null",true}`, `[{"a":2,"b":1},[1,200],null,null,true]`},
	{"jsonb array", 3807, `{"{\"a\": null}",NULL}`, `[{"a":null},null]`},
	{"enum array", encOIDEnumArr, `{"it's \"complicated\", {really}",NULL}`, `["it's \"complicated\", {really}",null]`},
	{"domain over array", encOIDDomArr, `{3,4}`, `[3,4]`},
	{"array of unknown elements", encOIDBadArray, `{a,NULL}`, `["a",null]`},
	{"int2vector", 22, `1 2 3`, `[1,2,3]`},
	{"int2vector empty", 22, ``, `[]`},
	{"oidvector", 30, `4294967295 0`, `["4294967295","0"]`},

	// Composites: keys in jsonb order, empty unquoted field is NULL, "" is
	// an empty string, "" inside quotes is a quote, fields by type.
	{"composite", encOIDC1, `(1,"x y","2026-11-30 00:44:18.567266+00","{2020-01-01,infinity}","{""k"":[1,2]}")`,
		`{"a":"x y","d":["2020-01-01","infinity"],"e":{"k":[1,2]},"bb":"2026-11-30T00:44:18.567266+00:00","zeta":1}`},
	{"composite NULLs and empty", encOIDC1, `(,"",,{},)`, `{"a":"","d":[],"e":null,"bb":null,"zeta":null}`},
	{"composite escapes", encOIDC1, `(2,"a""b\\c,(d)",,,"""s""")`, `{"a":"a\"b\\c,(d)","d":null,"e":"s","bb":null,"zeta":2}`},
	{"composite backslash outside quotes", encOIDC1, `(3,a\,b,,,)`, `{"a":"a,b","d":null,"e":null,"bb":null,"zeta":3}`},
	{"composite nested", encOIDOuter, `(7,"(1,x,,,)","{""(2,y,,{},)"",NULL}",t)`,
		`{"id":7,"in":{"a":"x","d":null,"e":null,"bb":null,"zeta":1},"x y":true,"list":[{"a":"y","d":[],"e":null,"bb":null,"zeta":2},null]}`},
	{"composite array", encOIDC1Array, `{"(1,x,,,)",NULL,"(,,,,)"}`,
		`[{"a":"x","d":null,"e":null,"bb":null,"zeta":1},null,{"a":null,"d":null,"e":null,"bb":null,"zeta":null}]`},
	{"composite without attributes", encOIDEmpty, `()`, `{}`},

	// hstore has a cast to json, which to_jsonb uses: values are strings.
	{"hstore", encOIDHstore, `"a"=>"1", "x"=>"", "q\""=>"\\", "é"=>"ü", "b c"=>NULL`, `{"a":"1","x":"","q\"":"\\","é":"ü","b c":null}`},
	{"hstore empty", encOIDHstore, ``, `{}`},
	{"hstore unquoted", encOIDHstore, ` a => 1 ,b=>null`, `{"a":"1","b":null}`},
	{"other cast to json: text", encOIDGeometry, `0101000000000000000000F03F`, `"0101000000000000000000F03F"`},
}

func TestEncodeValue(t *testing.T) {
	types := encTestTypes()
	for _, c := range encCases {
		t.Run(c.name, func(t *testing.T) {
			prefix := []byte(`[`)
			got, err := types.encodeValue(prefix, c.oid, []byte(c.text))
			if err != nil {
				t.Fatalf("EncodeValue(%d, %q): %v", c.oid, c.text, err)
			}
			if string(got[1:]) != c.want {
				t.Errorf("EncodeValue(%d, %q)\n got  %s\n want %s", c.oid, c.text, got[1:], c.want)
			}
			if string(got[:1]) != "[" {
				t.Errorf("EncodeValue overwrote dst")
			}
			if !json.Valid(got[1:]) {
				t.Errorf("invalid JSON %s", got[1:])
			}
		})
	}
}

// Malformed text of a structured type is an error (the caller then writes
// the text as a string), and dst comes back unchanged.
func TestEncodeValueMalformed(t *testing.T) {
	types := encTestTypes()
	for _, c := range []struct {
		oid  uint32
		text string
	}{
		{1007, `{1,2`},
		{1007, `{1}}`},
		{1007, `{{1},2}`},
		{1007, `{1,{2}}`},
		{1007, `1,2`},
		{1007, `[1:2]{1,2}`},
		{1007, `[1:2]`},
		{1007, `{1,,2}`},
		{1007, `{a"b"}`},
		{1009, `{"abc}`},
		{1009, `{abc\`},
		{1009, ``},
		{encOIDC1, `(1,2)`},
		{encOIDC1, `(1,,,,,)`},
		{encOIDC1, `1,,,,`},
		{encOIDC1, `(1,"x,,,`},
		{encOIDC1, `(1,,,,)x`},
		{encOIDC1, `(1,,,,"{""a"":}")`}, // its json field is malformed
		{encOIDEmpty, `(1)`},
		{encOIDC1Array, `{"(1)"}`},
		{114, `{"a":1`},
		{114, `{"a" 1}`},
		{114, `{a:1}`},
		{114, `[1,]`},
		{114, `01`},
		{114, `1.`},
		{114, `"\x"`},
		{114, "\"a\nb\""},
		{114, `tru`},
		{114, `[1] 2`},
		{114, ``},
		{3802, `{"a":1}}`},
		{encOIDHstore, `"a"=>`},
		{encOIDHstore, `a=>1,`},
		{encOIDHstore, `"a`},
		{encOIDHstore, `a=1`},
		{114, strings.Repeat("[", encMaxDepth+10)},
		{1007, strings.Repeat("{", encMaxDepth+10)},
	} {
		dst := []byte("prefix")
		got, err := types.encodeValue(dst, c.oid, []byte(c.text))
		if err == nil {
			t.Errorf("EncodeValue(%d, %q) = %s, want an error", c.oid, encTruncate([]byte(c.text)), got)
			continue
		}
		if string(got) != "prefix" {
			t.Errorf("EncodeValue(%d, %q) changed dst to %q on error", c.oid, c.text, got)
		}
	}
}

func TestEncodeTuple(t *testing.T) {
	types := encTestTypes()
	cols := []relColumn{{"id", 20}, {"name", 25}, {"doc", 3802}, {"tags", 1009}, {"gone", 25}, {`we"ird`, 1184}, {"bad", 1007}}
	tuple := &pglogrepl.TupleData{ColumnNum: 7, Columns: []*pglogrepl.TupleDataColumn{
		{DataType: 't', Data: []byte("42")},
		{DataType: 'n'},
		{DataType: 'u'},
		{DataType: 't', Data: []byte(`{a,NULL}`)},
		{DataType: 'u'},
		{DataType: 't', Data: []byte("2026-11-30 10:00:00+00")},
		{DataType: 't', Data: []byte(`{1,2`)}, // malformed: written as a string
	}}
	got, unchanged, err := types.encodeTuple([]byte("x"), cols, tuple)
	if err != nil {
		t.Fatal(err)
	}
	const want = `x{"id":42,"name":null,"tags":["a",null],"we\"ird":"2026-11-30T10:00:00+00:00","bad":"{1,2"}`
	if string(got) != want {
		t.Errorf("EncodeTuple\n got  %s\n want %s", got, want)
	}
	if strings.Join(unchanged, ",") != "doc,gone" {
		t.Errorf("unchanged = %q, want [doc gone]", unchanged)
	}

	// Only unchanged TOAST columns.
	got, unchanged, err = types.encodeTuple(nil, cols[2:3], &pglogrepl.TupleData{ColumnNum: 1, Columns: []*pglogrepl.TupleDataColumn{{DataType: 'u'}}})
	if err != nil || string(got) != `{}` || len(unchanged) != 1 {
		t.Errorf("only TOAST: %s %q %v", got, unchanged, err)
	}

	// No tuple (no old image): null.
	if got, _, err := types.encodeTuple(nil, cols, nil); err != nil || string(got) != "null" {
		t.Errorf("nil tuple: %s %v", got, err)
	}

	// Binary values are never requested; a width mismatch means the relation
	// changed under us. Both are errors, and dst is unchanged.
	for name, tup := range map[string]*pglogrepl.TupleData{
		"binary": {ColumnNum: 1, Columns: []*pglogrepl.TupleDataColumn{{DataType: 'b', Data: []byte{0, 0, 0, 1}}}},
		"width":  {ColumnNum: 2, Columns: []*pglogrepl.TupleDataColumn{{DataType: 'n'}, {DataType: 'n'}}},
	} {
		got, _, err := types.encodeTuple([]byte("x"), cols[:1], tup)
		if err == nil || string(got) != "x" {
			t.Errorf("%s: got %q, %v; want an error and dst unchanged", name, got, err)
		}
	}
}

// TestEncodeZeroTypes: a zero pgTypes knows no type and writes strings.
func TestEncodeZeroTypes(t *testing.T) {
	var types pgTypes
	got, err := types.encodeValue(nil, 23, []byte("1"))
	if err != nil || string(got) != `"1"` {
		t.Errorf("got %s, %v", got, err)
	}
}

func TestEncodeAllocs(t *testing.T) {
	types := encTestTypes()
	cols, tuple := encBenchRow()
	buf := make([]byte, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		_, _, _ = types.encodeTuple(buf[:0], cols, tuple)
	})
	if allocs != 0 {
		t.Errorf("EncodeTuple of a typical row allocates %v times, want 0", allocs)
	}
}

// encBenchRow is a typical row: keys, text, a timestamp, money amounts.
func encBenchRow() ([]relColumn, *pglogrepl.TupleData) {
	cols := []relColumn{
		{"id", 20}, {"customer_id", 23}, {"status", 25}, {"note", 25},
		{"total", 1700}, {"discount", 1700}, {"placed_at", 1184}, {"updated_at", 1184}, {"paid", 16},
	}
	vals := []string{
		"1234567", "42", "shipped", `Leave at the door, ring twice "please"`,
		"19.90", "0.00", "2026-11-30 10:00:00.123456+00", "2026-11-30 10:05:42.5+00", "t",
	}
	tuple := &pglogrepl.TupleData{ColumnNum: uint16(len(cols))}
	for _, v := range vals {
		tuple.Columns = append(tuple.Columns, &pglogrepl.TupleDataColumn{DataType: 't', Length: uint32(len(v)), Data: []byte(v)})
	}
	return cols, tuple
}

func BenchmarkEncodeTuple(b *testing.B) {
	types := newPGTypes()
	cols, tuple := encBenchRow()
	buf := make([]byte, 0, 1024)
	var size int
	for _, c := range tuple.Columns {
		size += len(c.Data)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		out, _, err := types.encodeTuple(buf[:0], cols, tuple)
		if err != nil {
			b.Fatal(err)
		}
		buf = out
	}
}

func FuzzEncodeValue(f *testing.F) {
	oids := []uint32{
		encOIDC1, encOIDC1Array, encOIDOuter, encOIDEmpty, encOIDDomArr, encOIDBadArray,
		encOIDHstore, 1007, 1009, 1020, 1185, 199, 3807, 114, 3802, 1700, 701, 1184, 1114, 16, 25, 22, 30,
	}
	for _, c := range encCases {
		for i, o := range oids {
			if o == c.oid {
				f.Add(uint8(i), c.text)
			}
		}
	}
	types := encTestTypes()
	f.Fuzz(func(t *testing.T, sel uint8, text string) {
		oid := oids[int(sel)%len(oids)]
		got, err := types.encodeValue([]byte("pre"), oid, []byte(text))
		if string(got[:3]) != "pre" {
			t.Fatalf("dst prefix overwritten: %q", got)
		}
		if err != nil {
			if len(got) != 3 {
				t.Fatalf("error %v but dst changed to %q", err, got)
			}
			return
		}
		out := got[3:]
		if !json.Valid(out) || !utf8.Valid(out) {
			t.Fatalf("EncodeValue(%d, %q) = %q: not valid UTF-8 JSON", oid, text, out)
		}
	})
}

// encSafePrefix checks eight bytes at a time; every byte value at every
// position of a word must stop it exactly where the byte loop would.
func TestEncSafePrefix(t *testing.T) {
	for p := range 24 {
		for c := range 256 {
			s := []byte(strings.Repeat("a", 24))
			s[p] = byte(c)
			want := 24
			if !encSafe[c] {
				want = p
			}
			if got := encSafePrefix(s); got != want {
				t.Fatalf("byte %#x at %d: encSafePrefix = %d, want %d", c, p, got, want)
			}
		}
	}
}

func TestEncodeJSONBAllocs(t *testing.T) {
	types := newPGTypes()
	text := []byte(`{"id": 7, "name": "Ann", "tags": ["a", "b"], "address": {"city": "Paris", "zip": "75001"}, "score": 1.5}`)
	buf := make([]byte, 0, 1024)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = types.encodeValue(buf[:0], 3802, text)
	})
	if allocs != 0 {
		t.Errorf("EncodeValue of a jsonb object without escapes allocates %v times, want 0", allocs)
	}
}

// BenchmarkEncStringEscapes is encString on text where every tenth byte
// needs an escape (quotes, backslashes, control characters).
func BenchmarkEncStringEscapes(b *testing.B) {
	s := []byte(strings.Repeat("abc\"def\\g\nhij\tk\x01lmnopqr\r", 40))
	buf := make([]byte, 0, 4*len(s))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		buf = encString(buf[:0], s)
	}
}

// BenchmarkEncodeJSONB is a jsonb document with nested objects and arrays
// (keys sorted as jsonb's text form has them).
func BenchmarkEncodeJSONB(b *testing.B) {
	types := newPGTypes()
	doc := []byte(`{"id": 7, "name": "Ada \"Countess\" Lovelace", "tags": ["a", "b", "c"], "address": {"city": "London", "zip": "W1"}, "orders": [{"id": 1, "total": 19.90, "lines": [{"sku": "x", "qty": 2}, {"sku": "y", "qty": 1}]}, {"id": 2, "total": 0.5, "lines": []}], "meta": {}}`)
	buf := make([]byte, 0, 1024)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := types.encodeValue(buf[:0], 3802, doc)
		if err != nil {
			b.Fatal(err)
		}
		buf = out
	}
}
