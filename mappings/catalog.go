package mappings

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
)

// Catalog describes the tables of a database as far as mappings need them.
// ReadCatalog fills it from a live server; tests build it by hand. Its
// methods build a lookup index on first use: do not share a Catalog between
// goroutines before a first call to Table.
type Catalog struct {
	// Tables, sorted by schema and name.
	Tables []*Table

	byName map[TableName]*Table
}

// Table is one table (or view) of the catalog.
type Table struct {
	Name TableName
	// Kind is pg_class.relkind: 'r' table, 'p' partitioned table, 'v' view,
	// 'm' materialized view, 'f' foreign table.
	Kind byte
	// Columns in attnum order, without dropped or system columns.
	Columns []*Column
	// PrimaryKey columns in key order; empty when the table has none.
	PrimaryKey []string
	// ReplicaIdentity is pg_class.relreplident: 'd' default (primary key),
	// 'f' full, 'i' index, 'n' nothing.
	ReplicaIdentity byte
	// IdentityColumns are the columns the before image of an update or
	// delete carries: the primary key for 'd', the identity index for 'i',
	// every column for 'f', none for 'n'.
	IdentityColumns []string
	ForeignKeys     []*ForeignKey
	Indexes         []*Index
}

// Column is one column of a table.
type Column struct {
	Name string
	// Num is pg_attribute.attnum.
	Num int
	// Type is the type as format_type() prints it, typmod included:
	// "character varying(20)", "numeric(10,2)", "timestamp with time zone".
	Type string
	// BaseType is the type without typmod, with domains resolved to their
	// base type: "character varying", "numeric". Generated SQL casts
	// parameters to it.
	BaseType string
	TypeOID  uint32
	// Category is pg_type.typcategory of BaseType ('S' string, 'N' numeric,
	// 'A' array, 'E' enum, …).
	Category byte
	// ElemType is the element's BaseType for arrays, else "".
	ElemType string
	NotNull  bool
}

// ForeignKey is a foreign key constraint of a table.
type ForeignKey struct {
	Name       string
	Columns    []string
	RefTable   TableName
	RefColumns []string
}

// Index is a btree (or other) index of a table. Expression columns are "".
type Index struct {
	Name    string
	Columns []string
	Unique  bool
	Primary bool
	Partial bool
}

// Table returns the named table, or nil.
func (c *Catalog) Table(name TableName) *Table {
	if c.byName == nil || len(c.byName) != len(c.Tables) {
		c.byName = make(map[TableName]*Table, len(c.Tables))
		for _, t := range c.Tables {
			c.byName[t.Name] = t
		}
	}
	return c.byName[name]
}

// Column returns the named column, or nil.
func (t *Table) Column(name string) *Column {
	for _, c := range t.Columns {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (t *Table) columnNames() []string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = c.Name
	}
	return names
}

// isUnique reports whether cols (in any order) are the primary key or the
// columns of a unique, non-partial index.
func (t *Table) isUnique(cols []string) bool {
	if sameSet(cols, t.PrimaryKey) {
		return true
	}
	for _, ix := range t.Indexes {
		if ix.Unique && !ix.Partial && sameSet(cols, ix.Columns) {
			return true
		}
	}
	return false
}

// hasIndexOn reports whether an index starts with cols, in any order, so
// that `cols = ANY(…)` lookups do not scan the table.
func (t *Table) hasIndexOn(cols []string) bool {
	for _, ix := range t.Indexes {
		if !ix.Partial && len(ix.Columns) >= len(cols) && sameSet(cols, ix.Columns[:len(cols)]) {
			return true
		}
	}
	return false
}

// foreignKeyTo finds a constraint of t whose columns are cols (in any
// order) and that points at ref. It returns the referenced columns in the
// order of cols.
func (t *Table) foreignKeyTo(cols []string, ref TableName) []string {
	for _, fk := range t.ForeignKeys {
		if fk.RefTable != ref || !sameSet(cols, fk.Columns) {
			continue
		}
		out := make([]string, len(cols))
		for i, c := range cols {
			out[i] = fk.RefColumns[slices.Index(fk.Columns, c)]
		}
		return out
	}
	return nil
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) || len(a) == 0 {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// Querier runs a query. *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// The catalog queries read every user table and view. They are plain
// SELECTs on pg_catalog: any role that can log in may run them.
const (
	catalogTablesSQL = `SELECT c.oid::int8, n.nspname::text, c.relname::text, c.relkind::text, c.relreplident::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname !~ '^pg_(toast|temp)'
  AND NOT c.relispartition`

	catalogColumnsSQL = `SELECT a.attrelid::int8, a.attname::text, a.attnum::int4,
  format_type(a.atttypid, a.atttypmod),
  format_type(b.oid, NULL),
  a.atttypid::int8,
  b.typcategory::text,
  CASE WHEN b.typcategory = 'A' THEN format_type(b.typelem, NULL) ELSE '' END,
  a.attnotnull
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE a.attnum > 0 AND NOT a.attisdropped
  AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname !~ '^pg_(toast|temp)'
ORDER BY a.attrelid, a.attnum`

	catalogIndexesSQL = `SELECT i.indrelid::int8, ic.relname::text, i.indisunique, i.indisprimary, i.indisreplident,
  i.indpred IS NOT NULL,
  ARRAY(SELECT coalesce(a.attname::text, '')
        FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
        LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0
        WHERE k.ord <= i.indnkeyatts
        ORDER BY k.ord)
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_class c ON c.oid = i.indrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname !~ '^pg_(toast|temp)'
ORDER BY i.indrelid, ic.relname`

	catalogForeignKeysSQL = `SELECT con.conrelid::int8, con.conname::text, fn.nspname::text, fc.relname::text,
  ARRAY(SELECT a.attname::text FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum ORDER BY k.ord),
  ARRAY(SELECT a.attname::text FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
        JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum ORDER BY k.ord)
FROM pg_constraint con
JOIN pg_class fc ON fc.oid = con.confrelid
JOIN pg_namespace fn ON fn.oid = fc.relnamespace
WHERE con.contype = 'f'
ORDER BY con.conrelid, con.conname`
)

// ReadCatalog reads the user tables, their columns, keys, indexes, foreign
// keys and replica identities. It runs four queries; db may be a pool.
func ReadCatalog(ctx context.Context, db Querier) (*Catalog, error) {
	byOID := map[int64]*Table{}
	identIndex := map[int64][]string{}
	if err := each(ctx, db, catalogTablesSQL, func(r pgx.Rows) error {
		var (
			oid                   int64
			schema, name, k, repl string
		)
		if err := r.Scan(&oid, &schema, &name, &k, &repl); err != nil {
			return err
		}
		byOID[oid] = &Table{Name: TableName{schema, name}, Kind: k[0], ReplicaIdentity: repl[0]}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := each(ctx, db, catalogColumnsSQL, func(r pgx.Rows) error {
		var (
			oid, typeOID int64
			c            Column
			cat          string
		)
		if err := r.Scan(&oid, &c.Name, &c.Num, &c.Type, &c.BaseType, &typeOID, &cat, &c.ElemType, &c.NotNull); err != nil {
			return err
		}
		c.TypeOID, c.Category = uint32(typeOID), cat[0]
		if t := byOID[oid]; t != nil {
			t.Columns = append(t.Columns, &c)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := each(ctx, db, catalogIndexesSQL, func(r pgx.Rows) error {
		var (
			oid   int64
			ix    Index
			ident bool
		)
		if err := r.Scan(&oid, &ix.Name, &ix.Unique, &ix.Primary, &ident, &ix.Partial, &ix.Columns); err != nil {
			return err
		}
		t := byOID[oid]
		if t == nil {
			return nil
		}
		t.Indexes = append(t.Indexes, &ix)
		if ix.Primary {
			t.PrimaryKey = ix.Columns
		}
		if ident {
			identIndex[oid] = ix.Columns
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := each(ctx, db, catalogForeignKeysSQL, func(r pgx.Rows) error {
		var (
			oid    int64
			fk     ForeignKey
			schema string
		)
		if err := r.Scan(&oid, &fk.Name, &schema, &fk.RefTable.Name, &fk.Columns, &fk.RefColumns); err != nil {
			return err
		}
		fk.RefTable.Schema = schema
		if t := byOID[oid]; t != nil {
			t.ForeignKeys = append(t.ForeignKeys, &fk)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	cat := &Catalog{}
	for oid, t := range byOID {
		switch t.ReplicaIdentity {
		case 'd':
			t.IdentityColumns = t.PrimaryKey
		case 'i':
			t.IdentityColumns = identIndex[oid]
		case 'f':
			t.IdentityColumns = t.columnNames()
		}
		cat.Tables = append(cat.Tables, t)
	}
	cat.sort()
	return cat, nil
}

func (c *Catalog) sort() {
	sort.Slice(c.Tables, func(i, j int) bool {
		a, b := c.Tables[i].Name, c.Tables[j].Name
		if a.Schema != b.Schema {
			return a.Schema < b.Schema
		}
		return a.Name < b.Name
	})
	c.byName = nil
}

func each(ctx context.Context, db Querier, sql string, f func(pgx.Rows) error, args ...any) error {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("mappings: reading the catalog: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return fmt.Errorf("mappings: reading the catalog: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("mappings: reading the catalog: %w", err)
	}
	return nil
}
