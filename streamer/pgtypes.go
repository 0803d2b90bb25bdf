package streamer

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// typeKind says how PostgreSQL's to_jsonb() encodes the values of a type, and
// so how encodeValue turns the type's text form into JSON.
type typeKind uint8

const (
	// kindString: a JSON string of the text form. This is what to_jsonb does
	// for every type it has no rule for: enum, uuid, bytea, inet, cidr,
	// macaddr, money, oid, bit, varbit, interval, time, timetz, ranges,
	// multiranges, tsvector, xml, char(n), geometric types, and any type
	// encodeValue does not know.
	kindString typeKind = iota
	// kindBool: true or false.
	kindBool
	// kindNumber (int2, int4, int8, float4, float8, numeric): a JSON number
	// written as numeric_out writes it (scale kept, exponents expanded);
	// NaN, Infinity and -Infinity as strings.
	kindNumber
	// kindJSON (json): embedded, normalized as jsonb normalizes it: keys
	// sorted, duplicate keys resolved to the last value, numbers as numeric.
	kindJSON
	// kindJSONB (jsonb): embedded.
	kindJSONB
	// kindDate: a string; the ISO text form is already what to_jsonb writes.
	kindDate
	// kindTimestamp: a string with 'T' between date and time.
	kindTimestamp
	// kindTimestampTZ: like kindTimestamp, with the offset written ±HH:MM[:SS].
	kindTimestampTZ
	// kindArray: nested JSON arrays (bounds dropped), elements by Elem.
	kindArray
	// kindComposite: an object of Fields, keys in jsonb order.
	kindComposite
	// kindVector (int2vector, oidvector): a JSON array of the space-separated
	// elements, each encoded by Elem.
	kindVector
	// kindHstore (the hstore extension, which has a cast to json): an object
	// of string values, as hstore_to_json writes it.
	kindHstore
	// kindJSONCast: a non-built-in type with another cast to json, which
	// to_jsonb calls (PostGIS geometry, for one). decant cannot run it and
	// writes the text form as a string.
	kindJSONCast
)

var encKindNames = [...]string{"string", "bool", "number", "json", "jsonb", "date", "timestamp", "timestamptz", "array", "composite", "vector", "hstore", "jsoncast"}

func (k typeKind) String() string {
	if int(k) < len(encKindNames) {
		return encKindNames[k]
	}
	return fmt.Sprintf("TypeKind(%d)", uint8(k))
}

// pgType describes one PostgreSQL type, as needed to encode its text form.
// A domain is described by its base type's Kind, Elem, Delim and Fields,
// under its own OID and Name. pgTypes values handed out by pgTypes are shared and
// must not be modified.
type pgType struct {
	OID    uint32
	Name   string      // format_type name, for messages
	Kind   typeKind    // how to_jsonb encodes the type
	Elem   uint32      // KindArray, KindVector: element type OID
	Delim  byte        // KindArray: element delimiter (',' except box ';')
	Fields []typeField // KindComposite: attributes in order, dropped ones left out

	// keys holds, for composites, the field indexes in the order jsonb sorts
	// object keys (shorter first, then bytewise), each with its key written
	// as `"name":`. pgTypes fills it when it caches the pgType.
	keys []encKey
}

// typeField is one attribute of a composite type.
type typeField struct {
	Name string
	OID  uint32
}

type encKey struct {
	field int
	json  []byte // `"name":`
}

// pgTypes is a cache of pgType by OID. It is safe for concurrent use: get
// and the encode methods never block, load serializes with other loads.
type pgTypes struct {
	mu sync.Mutex                 // serializes writers
	m  atomic.Pointer[encTypeMap] // copy-on-write, never modified once stored
}

// encTypeMap is one immutable version of the cache. Built-in types are also
// indexed by OID in low, which is cheaper than the map on the hot path.
type encTypeMap struct {
	low []*pgType
	all map[uint32]*pgType
}

func (m *encTypeMap) get(oid uint32) *pgType {
	if m == nil {
		return nil
	}
	if oid < uint32(len(m.low)) {
		if ti := m.low[oid]; ti != nil {
			return ti
		}
	}
	return m.all[oid]
}

// querier runs a query. *pgx.Conn and *pgxpool.Pool satisfy it.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// newPGTypes returns a cache holding PostgreSQL's built-in types (and their
// arrays). It does no I/O; user-defined types (enums, domains, composites
// and their arrays) are added by load.
func newPGTypes() *pgTypes {
	infos := make([]*pgType, 0, 2*len(encBuiltins))
	for _, b := range encBuiltins {
		delim := byte(',')
		if b.oid == 603 { // box: its text form contains commas
			delim = ';'
		}
		infos = append(infos,
			&pgType{OID: b.oid, Name: b.name, Kind: b.kind, Elem: b.elem, Delim: ','},
			&pgType{OID: b.array, Name: b.name + "[]", Kind: kindArray, Elem: b.oid, Delim: delim})
	}
	t := &pgTypes{}
	t.putLocked(infos)
	return t
}

// snapshot returns the current version of the cache; nil (empty) for a
// zero pgTypes.
func (t *pgTypes) snapshot() *encTypeMap { return t.m.Load() }

// get returns the cached description of oid.
func (t *pgTypes) get(oid uint32) (*pgType, bool) {
	ti := t.snapshot().get(oid)
	return ti, ti != nil
}

// put caches infos, replacing any with the same OID.
func (t *pgTypes) put(infos ...*pgType) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.putLocked(infos)
}

func (t *pgTypes) putLocked(infos []*pgType) {
	m := &encTypeMap{all: map[uint32]*pgType{}}
	if old := t.snapshot(); old != nil {
		m.low = old.low
		m.all = make(map[uint32]*pgType, len(old.all)+len(infos))
		for k, v := range old.all {
			m.all[k] = v
		}
	}
	copied := false
	for _, ti := range infos {
		ti.keys = encSortKeys(ti.Fields)
		m.all[ti.OID] = ti
		if ti.OID >= encLowOIDs {
			continue
		}
		if !copied { // low is shared with older versions: copy on write
			low := make([]*pgType, encLowOIDs)
			copy(low, m.low)
			m.low, copied = low, true
		}
		m.low[ti.OID] = ti
	}
	t.m.Store(m)
}

// encLowOIDs bounds the OIDs also indexed by slice; built-in types are below.
const encLowOIDs = 8192

// encSortKeys orders composite fields as jsonb orders object keys.
func encSortKeys(fields []typeField) []encKey {
	if len(fields) == 0 {
		return nil
	}
	keys := make([]encKey, len(fields))
	for i, f := range fields {
		keys[i] = encKey{field: i, json: append(encString(nil, []byte(f.Name)), ':')}
	}
	slices.SortStableFunc(keys, func(a, b encKey) int {
		na, nb := fields[a.field].Name, fields[b.field].Name
		if c := cmp.Compare(len(na), len(nb)); c != 0 {
			return c
		}
		return cmp.Compare(na, nb)
	})
	return keys
}

// encLoadSQL describes types by OID. An array is a varlena type with an
// element type (this also holds before PostgreSQL 14, which has no
// typsubscript); its delimiter is its element type's. A composite's
// attributes come in attnum order without dropped ones, as record_out
// writes them. For a base type, the function of its cast to json if any:
// to_jsonb uses it instead of the text form.
const encLoadSQL = `SELECT t.oid, format_type(t.oid, NULL), t.typtype::text,
       t.typelem <> 0 AND t.typlen = -1, t.typelem, coalesce(e.typdelim::text, ','), t.typbasetype,
       coalesce(a.names, '{}'), coalesce(a.types, '{}'),
       coalesce((SELECT p.proname::text FROM pg_catalog.pg_cast c JOIN pg_catalog.pg_proc p ON p.oid = c.castfunc
                 WHERE c.castsource = t.oid AND c.casttarget = 'pg_catalog.json'::pg_catalog.regtype AND c.castmethod = 'f'
                 LIMIT 1), '')
FROM pg_catalog.pg_type t
LEFT JOIN pg_catalog.pg_type e ON e.oid = t.typelem
LEFT JOIN LATERAL (
    SELECT array_agg(attname::text ORDER BY attnum) AS names, array_agg(atttypid ORDER BY attnum) AS types
    FROM pg_catalog.pg_attribute
    WHERE attrelid = t.typrelid AND t.typrelid <> 0 AND attnum > 0 AND NOT attisdropped
) a ON true
WHERE t.oid = ANY($1::oid[])`

type encLoaded struct {
	info   pgType
	domain uint32 // base type of a domain
}

// load fetches from pg_type every OID not yet cached, with the types they
// refer to (array elements, domain base types, composite fields), one query
// per level of nesting. OIDs that do not exist stay unknown (and encode as
// strings). It blocks on db; concurrent loads are serialized.
func (t *pgTypes) load(ctx context.Context, db querier, oids ...uint32) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.snapshot()
	got := map[uint32]*encLoaded{}
	want := encMissing(oids, cur, got)
	for len(want) > 0 {
		for _, oid := range want {
			got[oid] = nil // asked: never ask again, even if it does not exist
		}
		rows, err := db.Query(ctx, encLoadSQL, want)
		if err != nil {
			return fmt.Errorf("load types %v: %w", want, err)
		}
		var refs []uint32
		for rows.Next() {
			var (
				l              encLoaded
				typtype, delim string
				isArray        bool
				elem           uint32
				names          []string
				types          []uint32
				jsonCast       string
			)
			if err := rows.Scan(&l.info.OID, &l.info.Name, &typtype, &isArray, &elem, &delim, &l.domain, &names, &types, &jsonCast); err != nil {
				rows.Close()
				return fmt.Errorf("load types %v: %w", want, err)
			}
			switch {
			case typtype == "d":
				refs = append(refs, l.domain)
			case typtype == "c":
				l.info.Kind = kindComposite
				l.info.Fields = make([]typeField, len(names))
				for i := range names {
					l.info.Fields[i] = typeField{Name: names[i], OID: types[i]}
				}
				refs = append(refs, types...)
			case isArray:
				l.info.Kind, l.info.Elem, l.info.Delim = kindArray, elem, ','
				if len(delim) == 1 {
					l.info.Delim = delim[0]
				}
				refs = append(refs, elem)
			case jsonCast == "hstore_to_json":
				l.info.Kind = kindHstore
			case jsonCast != "" && l.info.OID >= 16384: // to_jsonb ignores casts of built-in types
				l.info.Kind = kindJSONCast
			}
			got[l.info.OID] = &l
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("load types %v: %w", want, err)
		}
		want = encMissing(refs, cur, got)
	}

	var infos []*pgType
	for oid, l := range got {
		if l == nil {
			continue
		}
		ti := l.info
		if l.domain != 0 {
			base := encResolveDomain(l.domain, cur, got)
			ti = pgType{OID: oid, Name: l.info.Name}
			if base != nil {
				ti.Kind, ti.Elem, ti.Delim, ti.Fields = base.Kind, base.Elem, base.Delim, base.Fields
			}
		}
		infos = append(infos, &ti)
	}
	if len(infos) > 0 {
		t.putLocked(infos)
	}
	return nil
}

// encMissing returns the distinct OIDs that are neither cached nor fetched.
func encMissing(oids []uint32, cur *encTypeMap, got map[uint32]*encLoaded) []uint32 {
	var out []uint32
	for _, oid := range oids {
		if oid == 0 {
			continue
		}
		if cur.get(oid) != nil {
			continue
		}
		if _, ok := got[oid]; ok {
			continue
		}
		if !slices.Contains(out, oid) {
			out = append(out, oid)
		}
	}
	return out
}

// encResolveDomain follows a chain of domains to the base type.
func encResolveDomain(oid uint32, cur *encTypeMap, got map[uint32]*encLoaded) *pgType {
	for range 100 { // domains cannot be cyclic; the bound only guards the loop
		if ti := cur.get(oid); ti != nil {
			return ti
		}
		l := got[oid]
		if l == nil {
			return nil
		}
		if l.domain == 0 {
			return &l.info
		}
		oid = l.domain
	}
	return nil
}

// encBuiltin is a built-in type of PostgreSQL 15 that a column can have, with
// its array type. OIDs of built-in types are fixed across versions.
type encBuiltin struct {
	oid, array uint32
	name       string
	kind       typeKind
	elem       uint32 // vectors
}

// encBuiltins was generated from pg_type (oid < 10000, base, range and
// multirange types that have an array type).
var encBuiltins = []encBuiltin{
	{16, 1000, "boolean", kindBool, 0},
	{17, 1001, "bytea", kindString, 0},
	{18, 1002, "\"char\"", kindString, 0},
	{19, 1003, "name", kindString, 0},
	{20, 1016, "bigint", kindNumber, 0},
	{21, 1005, "smallint", kindNumber, 0},
	{22, 1006, "int2vector", kindVector, 21},
	{23, 1007, "integer", kindNumber, 0},
	{24, 1008, "regproc", kindString, 0},
	{25, 1009, "text", kindString, 0},
	{26, 1028, "oid", kindString, 0},
	{27, 1010, "tid", kindString, 0},
	{28, 1011, "xid", kindString, 0},
	{29, 1012, "cid", kindString, 0},
	{30, 1013, "oidvector", kindVector, 26},
	{114, 199, "json", kindJSON, 0},
	{142, 143, "xml", kindString, 0},
	{600, 1017, "point", kindString, 0},
	{601, 1018, "lseg", kindString, 0},
	{602, 1019, "path", kindString, 0},
	{603, 1020, "box", kindString, 0},
	{604, 1027, "polygon", kindString, 0},
	{628, 629, "line", kindString, 0},
	{650, 651, "cidr", kindString, 0},
	{700, 1021, "real", kindNumber, 0},
	{701, 1022, "double precision", kindNumber, 0},
	{718, 719, "circle", kindString, 0},
	{774, 775, "macaddr8", kindString, 0},
	{790, 791, "money", kindString, 0},
	{829, 1040, "macaddr", kindString, 0},
	{869, 1041, "inet", kindString, 0},
	{1042, 1014, "character", kindString, 0},
	{1043, 1015, "character varying", kindString, 0},
	{1082, 1182, "date", kindDate, 0},
	{1083, 1183, "time without time zone", kindString, 0},
	{1114, 1115, "timestamp without time zone", kindTimestamp, 0},
	{1184, 1185, "timestamp with time zone", kindTimestampTZ, 0},
	{1186, 1187, "interval", kindString, 0},
	{1266, 1270, "time with time zone", kindString, 0},
	{1560, 1561, "bit", kindString, 0},
	{1562, 1563, "bit varying", kindString, 0},
	{1700, 1231, "numeric", kindNumber, 0},
	{1790, 2201, "refcursor", kindString, 0},
	{2202, 2207, "regprocedure", kindString, 0},
	{2203, 2208, "regoper", kindString, 0},
	{2204, 2209, "regoperator", kindString, 0},
	{2205, 2210, "regclass", kindString, 0},
	{2206, 2211, "regtype", kindString, 0},
	{2950, 2951, "uuid", kindString, 0},
	{2970, 2949, "txid_snapshot", kindString, 0},
	{3220, 3221, "pg_lsn", kindString, 0},
	{3614, 3643, "tsvector", kindString, 0},
	{3615, 3645, "tsquery", kindString, 0},
	{3734, 3735, "regconfig", kindString, 0},
	{3769, 3770, "regdictionary", kindString, 0},
	{3802, 3807, "jsonb", kindJSONB, 0},
	{3904, 3905, "int4range", kindString, 0},
	{3906, 3907, "numrange", kindString, 0},
	{3908, 3909, "tsrange", kindString, 0},
	{3910, 3911, "tstzrange", kindString, 0},
	{3912, 3913, "daterange", kindString, 0},
	{3926, 3927, "int8range", kindString, 0},
	{4072, 4073, "jsonpath", kindString, 0},
	{4089, 4090, "regnamespace", kindString, 0},
	{4096, 4097, "regrole", kindString, 0},
	{4191, 4192, "regcollation", kindString, 0},
	{4451, 6150, "int4multirange", kindString, 0},
	{4532, 6151, "nummultirange", kindString, 0},
	{4533, 6152, "tsmultirange", kindString, 0},
	{4534, 6153, "tstzmultirange", kindString, 0},
	{4535, 6155, "datemultirange", kindString, 0},
	{4536, 6157, "int8multirange", kindString, 0},
	{5038, 5039, "pg_snapshot", kindString, 0},
	{5069, 271, "xid8", kindString, 0},
}
