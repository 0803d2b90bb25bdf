package mappings

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// LoadAndBind loads the mapping files at paths and binds them to the
// catalog read from db. On a mapping error it returns the Load error, or
// the Bind error with the partial model, and the catalog when it was read.
func LoadAndBind(ctx context.Context, db Querier, paths []string) (*Model, *Catalog, error) {
	set, err := LoadPaths(paths)
	if err != nil {
		return nil, nil, err
	}
	cat, err := ReadCatalog(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	m, err := Bind(set, cat)
	if err == nil {
		err = CheckSQL(ctx, db, m)
	}
	return m, cat, err
}

// Bind resolves a loaded Set against a database catalog: it finds every
// table and column, fills in the defaults (id = primary key, columns = all
// columns in table order, the other side of each join from the foreign key
// constraint or the primary key), checks join column types, and generates
// the build and lookup SQL.
//
// Problems are reported together as an ErrorList with file:line:column.
// When err is not nil the returned Model still holds the aggregates that
// bound without error (so that `decant check` can check them too); callers
// that need every aggregate must treat err as fatal.
func Bind(set *Set, cat *Catalog) (*Model, error) {
	m := &Model{}
	var errs ErrorList
	for _, as := range set.aggs {
		b := &binder{cat: cat}
		a := b.aggregate(as)
		if len(b.errs) > 0 || a == nil {
			errs = append(errs, b.errs...)
			continue
		}
		m.Aggregates = append(m.Aggregates, a)
	}
	m.index()
	return m, errs.err()
}

type binder struct {
	cat  *Catalog
	errs ErrorList
	agg  *Aggregate
}

func (b *binder) add(e *Error) { b.errs = append(b.errs, e) }

func (b *binder) table(schema, name string, at pos) *Table {
	tn := TableName{schema, name}
	if t := b.cat.Table(tn); t != nil {
		return t
	}
	var same, all []string
	for _, t := range b.cat.Tables {
		if t.Name.Schema == schema {
			same = append(same, t.Name.Name)
		}
		all = append(all, t.Name.String())
	}
	hint := suggest(name, same)
	if !strings.HasPrefix(hint, "; did you mean") {
		if h := suggest(tn.String(), all); strings.HasPrefix(h, "; did you mean") {
			hint = h
		} else if len(same) == 0 {
			hint = fmt.Sprintf("; schema %q has no tables (set `schema:` or write schema.table)", schema)
		}
	}
	b.add(at.errorf("table %s does not exist%s", tn, hint))
	return nil
}

func (b *binder) column(t *Table, col string, at pos, what string) *Column {
	if c := t.Column(col); c != nil {
		return c
	}
	b.add(at.errorf("%s: column %q does not exist in table %s%s", what, col, t.Name, suggest(col, t.columnNames())))
	return nil
}

func (b *binder) columns(t *Table, cols []string, at pos, what string) bool {
	ok := true
	for _, c := range cols {
		if b.column(t, c, at, what) == nil {
			ok = false
		}
	}
	return ok
}

func (b *binder) aggregate(as *aggSpec) *Aggregate {
	r := as.root
	t := b.table(r.schema, r.table, r.tableAt)
	if t == nil {
		return nil
	}
	a := &Aggregate{
		Name:       as.name,
		File:       as.at.File,
		Table:      t.Name,
		Index:      as.index,
		ESSettings: as.settings,
		ESMappings: as.mappings,
	}
	if a.Index == "" {
		a.Index = a.Name
	}
	b.agg = a
	switch {
	case as.id != nil:
		if !b.columns(t, as.id, as.idAt, "id") {
			return nil
		}
		a.ID = as.id
	case len(t.PrimaryKey) > 0:
		a.ID = t.PrimaryKey
	default:
		b.add(as.at.errorf("table %s has no primary key; add `id: [column, …]` naming columns that identify a row", t.Name))
		return nil
	}
	for _, c := range a.ID {
		a.IDTypes = append(a.IDTypes, t.Column(c).BaseType)
	}
	a.Root = b.node(r, nil, t)
	if len(b.errs) > 0 || a.Root == nil {
		return nil
	}
	a.Build = buildQuery(a)
	a.Batch, a.Shared = batchQuery(a)
	a.Spaced = spaced(a.Root)
	a.Roots = rootsQuery(a)
	a.Routes = routes(a)
	return a
}

// refKey is the key other rows point at by default: the aggregate id for
// the root, the primary key elsewhere.
func (b *binder) refKey(n *Node) []string {
	if n.Kind == Root {
		return b.agg.ID
	}
	return n.table.PrimaryKey
}

func (b *binder) node(s *relSpec, parent *Node, t *Table) *Node {
	n := &Node{Name: s.name, Path: s.at.Path, Table: t.Name, Parent: parent, Key: t.PrimaryKey, table: t}
	if parent != nil {
		if !b.join(n, s, parent) {
			return nil
		}
	}
	// Columns, value, rename.
	switch {
	case s.value != "":
		if b.column(t, s.value, s.valueAt, "value") == nil {
			return nil
		}
		n.Value = s.value
	case s.columnsSet:
		ok := true
		for i, c := range s.columns {
			if b.column(t, c, s.columnAt[i], "columns") == nil {
				ok = false
			}
		}
		if !ok {
			return nil
		}
		n.Columns = s.columns
	default:
		n.Columns = t.columnNames()
	}
	if len(s.rename) > 0 {
		n.Rename = map[string]string{}
		for _, c := range s.renameKeys {
			if !s.columnsSet && b.column(t, c, s.renameAt[c], "rename") == nil {
				continue
			}
			n.Rename[c] = s.rename[c]
		}
	}
	n.Where, n.whereAt = s.where, s.whereAt
	for _, o := range s.orderBy {
		if b.column(t, o.column, o.at, "order_by") != nil {
			n.OrderBy = append(n.OrderBy, OrderBy{Column: o.column, Desc: o.desc, Nulls: o.nulls})
		}
	}
	// Children, then key collisions in the object.
	keys := map[string]string{}
	for _, c := range n.Columns {
		out := n.OutputName(c)
		if prev, ok := keys[out]; ok {
			at := s.at
			if p, ok := s.renameAt[c]; ok {
				at = p
			}
			b.add(at.errorf("key %q is given by both %s and column %q; rename one of them", out, prev, c))
			continue
		}
		keys[out] = fmt.Sprintf("column %q", c)
	}
	for _, rs := range s.relations {
		if prev, ok := keys[rs.name]; ok {
			b.add(rs.at.errorf("relation %q clashes with %s in the same object; rename the relation or the column (rename: {%s: …})", rs.name, prev, rs.name))
			continue
		}
		keys[rs.name] = fmt.Sprintf("relation %q", rs.name)
		ct := b.table(rs.schema, rs.table, rs.tableAt)
		if ct == nil {
			continue
		}
		if c := b.node(rs, n, ct); c != nil {
			n.Children = append(n.Children, c)
		}
	}
	for _, fs := range s.fields {
		if n.Value != "" {
			b.add(fs.at.errorf("fields make an object, but %s is the single value of column %q: drop value or the fields", s.name, n.Value))
			break
		}
		if prev, ok := keys[fs.name]; ok {
			b.add(fs.at.errorf("field %q clashes with %s in the same object; rename one of them", fs.name, prev))
			continue
		}
		keys[fs.name] = fmt.Sprintf("field %q", fs.name)
		f := Field{Name: fs.name, Expr: fs.expr, Func: fs.fn, Column: fs.column, at: fs.at}
		if fs.fn != "" {
			for _, c := range n.Children {
				if c.Name == fs.relation {
					f.Relation = c
				}
			}
			if f.Relation == nil {
				var names []string
				for _, c := range n.Children {
					names = append(names, c.Name)
				}
				b.add(fs.at.errorf("%s: no relation %q in this object; a field reads one of the object's relations%s", fs.fn, fs.relation, suggest(fs.relation, names)))
				continue
			}
			if fs.column != "" && b.column(f.Relation.table, fs.column, fs.at, fs.fn) == nil {
				continue
			}
			if fs.fn == "count" {
				f.Type = "bigint"
			}
		}
		n.Fields = append(n.Fields, f)
	}
	return n
}

// join fills the kind and join columns of n from its relation spec.
func (b *binder) join(n *Node, s *relSpec, parent *Node) bool {
	pt, ct := parent.table, n.table
	var ok bool
	switch {
	case s.foreignKey != nil:
		n.Kind = OneToMany
		if s.single {
			n.Kind = OneToOne
		}
		n.ChildColumns = s.foreignKey
		n.ParentColumns, ok = b.link(s.fkAt, "foreign_key", ct, s.foreignKey, pt, func() []string { return b.refKey(parent) })
		n.unique = ct.isUnique(n.ChildColumns)
		return ok
	case s.references != nil:
		n.Kind = ManyToOne
		n.ParentColumns = s.references
		n.ChildColumns, ok = b.link(s.refAt, "references", pt, s.references, ct, func() []string { return ct.PrimaryKey })
		n.unique = ct.isUnique(n.ChildColumns)
		return ok
	case s.through != nil:
		n.Kind = ManyToMany
		th := s.through
		jt := b.table(th.schema, th.table, th.tableAt)
		if jt == nil {
			return false
		}
		n.Through, n.through = &jt.Name, jt
		okF := b.columns(jt, th.foreignKey, th.fkAt, "through.foreign_key")
		okR := b.columns(jt, th.references, th.refAt, "through.references")
		if !okF || !okR {
			return false
		}
		n.ThroughParentColumns, n.ThroughChildColumns = th.foreignKey, th.references
		n.ParentColumns = jt.foreignKeyTo(th.foreignKey, pt.Name)
		if n.ParentColumns == nil {
			n.ParentColumns = b.refKey(parent)
			if !b.keyLen(th.fkAt, "through.foreign_key", th.foreignKey, pt, n.ParentColumns) {
				return false
			}
		}
		n.ChildColumns = jt.foreignKeyTo(th.references, ct.Name)
		if n.ChildColumns == nil {
			n.ChildColumns = ct.PrimaryKey
			if !b.keyLen(th.refAt, "through.references", th.references, ct, n.ChildColumns) {
				return false
			}
		}
		okF = b.types(th.fkAt, "through.foreign_key", pt, n.ParentColumns, jt, n.ThroughParentColumns)
		okR = b.types(th.refAt, "through.references", ct, n.ChildColumns, jt, n.ThroughChildColumns)
		return okF && okR
	}
	return false
}

// keyLen checks that the columns of a join match the key they point at.
// link checks the columns cols of keyed that the key what (foreign_key or
// references) names, and returns the columns of target they point at: those
// of the foreign key constraint from cols to target, else def's. ok is false
// when it reported an error.
func (b *binder) link(at pos, what string, keyed *Table, cols []string, target *Table, def func() []string) (to []string, ok bool) {
	if !b.columns(keyed, cols, at, what) {
		return nil, false
	}
	to = keyed.foreignKeyTo(cols, target.Name)
	if to == nil {
		to = def()
		if !b.keyLen(at, what, cols, target, to) {
			return nil, false
		}
	}
	return to, b.types(at, what, target, to, keyed, cols)
}

func (b *binder) keyLen(at pos, what string, cols []string, target *Table, key []string) bool {
	if len(key) == 0 {
		b.add(at.errorf("%s %s: table %s has no primary key and no foreign key constraint from these columns says what they point at; add a primary key or a foreign key constraint",
			what, strings.Join(cols, ", "), target.Name))
		return false
	}
	if len(key) != len(cols) {
		b.add(at.errorf("%s has %d column(s) (%s) but the key of %s has %d (%s): list one column per key column, in key order",
			what, len(cols), strings.Join(cols, ", "), target.Name, len(key), strings.Join(key, ", ")))
		return false
	}
	return true
}

// types checks that each pair of join columns can be compared: the
// referenced key ca of ta with the referencing columns cb of tb.
func (b *binder) types(at pos, what string, ta *Table, ca []string, tb *Table, cb []string) bool {
	ok := true
	for i := range ca {
		x, y := ta.Column(ca[i]), tb.Column(cb[i])
		if x == nil || y == nil {
			b.add(at.errorf("%s: column %q of %s does not exist", what, ca[i], ta.Name))
			ok = false
			continue
		}
		if !comparable(x, y) {
			e := at.errorf("%s: %s.%s (%s) cannot be joined with %s.%s (%s): the types differ; change one column's type or fix the mapping",
				what, tb.Name, y.Name, y.Type, ta.Name, x.Name, x.Type)
			e.Fix = fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s TYPE %s USING %s::%s;", tb.Name.Sanitize(), ident(y.Name), x.Type, ident(y.Name), x.Type)
			b.add(e)
			ok = false
		}
	}
	return ok
}

// typeFamily groups types that PostgreSQL compares without casts.
func typeFamily(c *Column) string {
	switch c.BaseType {
	case "smallint", "integer", "bigint", "numeric", "real", "double precision", "oid":
		return "number"
	case "text", "character varying", "character", "name", "citext":
		return "string"
	case "timestamp without time zone", "timestamp with time zone", "date":
		return "time"
	}
	return c.BaseType
}

func comparable(a, b *Column) bool { return typeFamily(a) == typeFamily(b) }

// index builds the per-table route and before-image lookups.
func (m *Model) index() {
	m.routes = map[TableName][]*Route{}
	m.before = map[TableName][]string{}
	tables := map[TableName]*Table{}
	need := map[TableName]map[string]bool{}
	mark := func(t *Table, cols ...string) {
		if need[t.Name] == nil {
			need[t.Name] = map[string]bool{}
		}
		for _, c := range cols {
			need[t.Name][c] = true
		}
	}
	for _, a := range m.Aggregates {
		for _, r := range a.Routes {
			m.routes[r.Table] = append(m.routes[r.Table], r)
			t := r.Node.table
			if r.Node.Through != nil && *r.Node.Through == r.Table {
				t = r.Node.through
				mark(t, r.Node.ThroughChildColumns...)
			}
			tables[r.Table] = t
			mark(t, r.From...)
		}
	}
	for tn, cols := range need {
		t := tables[tn]
		var list []string
		for _, c := range t.Columns {
			if cols[c.Name] {
				list = append(list, c.Name)
			}
		}
		m.before[tn] = list
	}
	for _, rs := range m.routes {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Aggregate < rs[j].Aggregate })
	}
}
