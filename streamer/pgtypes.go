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

// TypeKind says how PostgreSQL's to_jsonb() encodes the values of a type, and
// so how EncodeValue turns the type's text form into JSON.
type TypeKind uint8

const (
	// KindString: a JSON string of the text form. This is what to_jsonb does
	// for every type it has no rule for: enum, uuid, bytea, inet, cidr,
	// macaddr, money, oid, bit, varbit, interval, time, timetz, ranges,
	// multiranges, tsvector, xml, char(n), geometric types, and any type
	// EncodeValue does not know.
	KindString TypeKind = iota
	// KindBool: true or false.
	KindBool
	// KindNumber (int2, int4, int8, float4, float8, numeric): a JSON number
	// written as numeric_out writes it (scale kept, exponents expanded);
	// NaN, Infinity and -Infinity as strings.
	KindNumber
	// KindJSON (json): embedded, normalized as jsonb normalizes it: keys
	// sorted, duplicate keys resolved to the last value, numbers as numeric.
	KindJSON
	// KindJSONB (jsonb): embedded.
	KindJSONB
	// KindDate: a string; the ISO text form is already what to_jsonb writes.
	KindDate
	// KindTimestamp: a string with 'T' between date and time.
	KindTimestamp
	// KindTimestampTZ: like KindTimestamp, with the offset written ±HH:MM[:SS].
	KindTimestampTZ
	// KindArray: nested JSON arrays (bounds dropped), elements by Elem.
	KindArray
	// KindComposite: an object of Fields, keys in jsonb order.
	KindComposite
	// KindVector (int2vector, oidvector): a JSON array of the space-separated
	// elements, each encoded by Elem.
	KindVector
	// KindHstore (the hstore extension, which has a cast to json): an object
	// of string values, as hstore_to_json writes it.
	KindHstore
	// KindJSONCast: a non-built-in type with another cast to json, which
	// to_jsonb calls (PostGIS geometry, for one). decant cannot run it and
	// writes the text form as a string.
	KindJSONCast
)

var encKindNames = [...]string{"string", "bool", "number", "json", "jsonb", "date", "timestamp", "timestamptz", "array", "composite", "vector", "hstore", "jsoncast"}

func (k TypeKind) String() string {
	if int(k) < len(encKindNames) {
		return encKindNames[k]
	}
	return fmt.Sprintf("TypeKind(%d)", uint8(k))
}

// TypeInfo describes one PostgreSQL type, as needed to encode its text form.
// A domain is described by its base type's Kind, Elem, Delim and Fields,
// under its own OID and Name. TypeInfos handed out by Types are shared and
// must not be modified.
type TypeInfo struct {
	OID    uint32
	Name   string   // format_type name, for messages
	Kind   TypeKind // how to_jsonb encodes the type
	Elem   uint32   // KindArray, KindVector: element type OID
	Delim  byte     // KindArray: element delimiter (',' except box ';')
	Fields []Field  // KindComposite: attributes in order, dropped ones left out

	// keys holds, for composites, the field indexes in the order jsonb sorts
	// object keys (shorter first, then bytewise), each with its key written
	// as `"name":`. Types fills it when it caches the TypeInfo.
	keys []encKey
}

// Field is one attribute of a composite type.
type Field struct {
	Name string
	OID  uint32
}

type encKey struct {
	field int
	json  []byte // `"name":`
}

// Types is a cache of TypeInfo by OID. It is safe for concurrent use: Get
// and the Encode methods never block, Load serializes with other Loads.
type Types struct {
	mu sync.Mutex                 // serializes writers
	m  atomic.Pointer[encTypeMap] // copy-on-write, never modified once stored
}

// encTypeMap is one immutable version of the cache. Built-in types are also
// indexed by OID in low, which is cheaper than the map on the hot path.
type encTypeMap struct {
	low []*TypeInfo
	all map[uint32]*TypeInfo
}

func (m *encTypeMap) get(oid uint32) *TypeInfo {
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

// Querier runs a query. *pgx.Conn and *pgxpool.Pool satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// NewTypes returns a cache holding PostgreSQL's built-in types (and their
// arrays). It does no I/O; user-defined types (enums, domains, composites
// and their arrays) are added by Load.
func NewTypes() *Types {
	infos := make([]*TypeInfo, 0, 2*len(encBuiltins))
	for _, b := range encBuiltins {
		delim := byte(',')
		if b.oid == 603 { // box: its text form contains commas
			delim = ';'
		}
		infos = append(infos,
			&TypeInfo{OID: b.oid, Name: b.name, Kind: b.kind, Elem: b.elem, Delim: ','},
			&TypeInfo{OID: b.array, Name: b.name + "[]", Kind: KindArray, Elem: b.oid, Delim: delim})
	}
	t := &Types{}
	t.putLocked(infos)
	return t
}

// snapshot returns the current version of the cache; nil (empty) for a
// zero Types.
func (t *Types) snapshot() *encTypeMap { return t.m.Load() }

// Get returns the cached description of oid.
func (t *Types) Get(oid uint32) (*TypeInfo, bool) {
	ti := t.snapshot().get(oid)
	return ti, ti != nil
}

// put caches infos, replacing any with the same OID.
func (t *Types) put(infos ...*TypeInfo) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.putLocked(infos)
}

func (t *Types) putLocked(infos []*TypeInfo) {
	m := &encTypeMap{all: map[uint32]*TypeInfo{}}
	if old := t.snapshot(); old != nil {
		m.low = old.low
		m.all = make(map[uint32]*TypeInfo, len(old.all)+len(infos))
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
			low := make([]*TypeInfo, encLowOIDs)
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
func encSortKeys(fields []Field) []encKey {
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
	info   TypeInfo
	domain uint32 // base type of a domain
}

// Load fetches from pg_type every OID not yet cached, with the types they
// refer to (array elements, domain base types, composite fields), one query
// per level of nesting. OIDs that do not exist stay unknown (and encode as
// strings). It blocks on db; concurrent Loads are serialized.
func (t *Types) Load(ctx context.Context, db Querier, oids ...uint32) error {
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
				l.info.Kind = KindComposite
				l.info.Fields = make([]Field, len(names))
				for i := range names {
					l.info.Fields[i] = Field{Name: names[i], OID: types[i]}
				}
				refs = append(refs, types...)
			case isArray:
				l.info.Kind, l.info.Elem, l.info.Delim = KindArray, elem, ','
				if len(delim) == 1 {
					l.info.Delim = delim[0]
				}
				refs = append(refs, elem)
			case jsonCast == "hstore_to_json":
				l.info.Kind = KindHstore
			case jsonCast != "" && l.info.OID >= 16384: // to_jsonb ignores casts of built-in types
				l.info.Kind = KindJSONCast
			}
			got[l.info.OID] = &l
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("load types %v: %w", want, err)
		}
		want = encMissing(refs, cur, got)
	}

	var infos []*TypeInfo
	for oid, l := range got {
		if l == nil {
			continue
		}
		ti := l.info
		if l.domain != 0 {
			base := encResolveDomain(l.domain, cur, got)
			ti = TypeInfo{OID: oid, Name: l.info.Name}
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
func encResolveDomain(oid uint32, cur *encTypeMap, got map[uint32]*encLoaded) *TypeInfo {
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
	kind       TypeKind
	elem       uint32 // vectors
}

// encBuiltins was generated from pg_type (oid < 10000, base, range and
// multirange types that have an array type).
var encBuiltins = []encBuiltin{
	{16, 1000, "boolean", KindBool, 0},
	{17, 1001, "bytea", KindString, 0},
	{18, 1002, "\"char\"", KindString, 0},
	{19, 1003, "name", KindString, 0},
	{20, 1016, "bigint", KindNumber, 0},
	{21, 1005, "smallint", KindNumber, 0},
	{22, 1006, "int2vector", KindVector, 21},
	{23, 1007, "integer", KindNumber, 0},
	{24, 1008, "regproc", KindString, 0},
	{25, 1009, "text", KindString, 0},
	{26, 1028, "oid", KindString, 0},
	{27, 1010, "tid", KindString, 0},
	{28, 1011, "xid", KindString, 0},
	{29, 1012, "cid", KindString, 0},
	{30, 1013, "oidvector", KindVector, 26},
	{114, 199, "json", KindJSON, 0},
	{142, 143, "xml", KindString, 0},
	{600, 1017, "point", KindString, 0},
	{601, 1018, "lseg", KindString, 0},
	{602, 1019, "path", KindString, 0},
	{603, 1020, "box", KindString, 0},
	{604, 1027, "polygon", KindString, 0},
	{628, 629, "line", KindString, 0},
	{650, 651, "cidr", KindString, 0},
	{700, 1021, "real", KindNumber, 0},
	{701, 1022, "double precision", KindNumber, 0},
	{718, 719, "circle", KindString, 0},
	{774, 775, "macaddr8", KindString, 0},
	{790, 791, "money", KindString, 0},
	{829, 1040, "macaddr", KindString, 0},
	{869, 1041, "inet", KindString, 0},
	{1042, 1014, "character", KindString, 0},
	{1043, 1015, "character varying", KindString, 0},
	{1082, 1182, "date", KindDate, 0},
	{1083, 1183, "time without time zone", KindString, 0},
	{1114, 1115, "timestamp without time zone", KindTimestamp, 0},
	{1184, 1185, "timestamp with time zone", KindTimestampTZ, 0},
	{1186, 1187, "interval", KindString, 0},
	{1266, 1270, "time with time zone", KindString, 0},
	{1560, 1561, "bit", KindString, 0},
	{1562, 1563, "bit varying", KindString, 0},
	{1700, 1231, "numeric", KindNumber, 0},
	{1790, 2201, "refcursor", KindString, 0},
	{2202, 2207, "regprocedure", KindString, 0},
	{2203, 2208, "regoper", KindString, 0},
	{2204, 2209, "regoperator", KindString, 0},
	{2205, 2210, "regclass", KindString, 0},
	{2206, 2211, "regtype", KindString, 0},
	{2950, 2951, "uuid", KindString, 0},
	{2970, 2949, "txid_snapshot", KindString, 0},
	{3220, 3221, "pg_lsn", KindString, 0},
	{3614, 3643, "tsvector", KindString, 0},
	{3615, 3645, "tsquery", KindString, 0},
	{3734, 3735, "regconfig", KindString, 0},
	{3769, 3770, "regdictionary", KindString, 0},
	{3802, 3807, "jsonb", KindJSONB, 0},
	{3904, 3905, "int4range", KindString, 0},
	{3906, 3907, "numrange", KindString, 0},
	{3908, 3909, "tsrange", KindString, 0},
	{3910, 3911, "tstzrange", KindString, 0},
	{3912, 3913, "daterange", KindString, 0},
	{3926, 3927, "int8range", KindString, 0},
	{4072, 4073, "jsonpath", KindString, 0},
	{4089, 4090, "regnamespace", KindString, 0},
	{4096, 4097, "regrole", KindString, 0},
	{4191, 4192, "regcollation", KindString, 0},
	{4451, 6150, "int4multirange", KindString, 0},
	{4532, 6151, "nummultirange", KindString, 0},
	{4533, 6152, "tsmultirange", KindString, 0},
	{4534, 6153, "tstzmultirange", KindString, 0},
	{4535, 6155, "datemultirange", KindString, 0},
	{4536, 6157, "int8multirange", KindString, 0},
	{5038, 5039, "pg_snapshot", KindString, 0},
	{5069, 271, "xid8", KindString, 0},
}
