package mappings

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/decant-cdc/decant/wire"
)

// Query is a generated SQL statement whose parameters are batches of key
// values: parameter $i is a text[] holding the i-th key column of every
// key in the batch, cast in SQL to Params[i].Type. Use Args to build them.
type Query struct {
	SQL    string
	Params []ParamSpec
}

// ParamSpec describes one parameter of a Query.
type ParamSpec struct {
	// Column is the key column whose values the parameter carries.
	Column string
	// Type is the PostgreSQL type the SQL casts the values to.
	Type string
}

// Args turns a batch of keys into the query's parameters. Each key holds
// one value per Params entry, encoded as PostgreSQL's to_jsonb encodes it
// (the encoding of raw change events): a JSON string gives its content, a
// number its literal, a boolean true or false, null SQL NULL. Arrays and
// objects are not valid key values.
func (q *Query) Args(keys [][]json.RawMessage) ([]any, error) {
	cols := make([][]*string, len(q.Params))
	texts := make([]string, len(q.Params)*len(keys)) // one allocation for the values cols point to
	for i := range cols {
		cols[i] = make([]*string, 0, len(keys))
	}
	for k, key := range keys {
		if len(key) != len(q.Params) {
			return nil, fmt.Errorf("mappings: key %d has %d values, want %d (%s)", k, len(key), len(q.Params), q.columnList())
		}
		for i, v := range key {
			t := &texts[k*len(q.Params)+i]
			null, err := jsonText(v, t)
			if err != nil {
				return nil, fmt.Errorf("mappings: key %d, column %s: %w", k, q.Params[i].Column, err)
			}
			if null {
				t = nil
			}
			cols[i] = append(cols[i], t)
		}
	}
	args := make([]any, len(cols))
	for i, c := range cols {
		args[i] = c
	}
	return args, nil
}

func (q *Query) columnList() string {
	names := make([]string, len(q.Params))
	for i, p := range q.Params {
		names[i] = p.Column
	}
	return strings.Join(names, ", ")
}

// jsonText returns the PostgreSQL text form of a to_jsonb-encoded scalar.
func jsonText(v json.RawMessage, text *string) (null bool, err error) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false, fmt.Errorf("empty value")
	}
	// Keys are mostly plain strings and numbers: their text is as written.
	if plain, null, ok := wire.PlainScalar(v); ok {
		if !null {
			*text = string(plain)
		}
		return null, nil
	}
	switch v[0] {
	case '"': // escapes, other UTF-8
		if err := json.Unmarshal(v, text); err != nil {
			return false, fmt.Errorf("invalid JSON string %s: %w", v, err)
		}
		return false, nil
	case '[', '{':
		return false, fmt.Errorf("key values must be scalars, got %.40s", v)
	}
	return false, fmt.Errorf("invalid JSON value %.40s", v)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// literal quotes s as an SQL string literal that means the same with
// standard_conforming_strings on or off.
func literal(s string) string {
	s = strings.ReplaceAll(s, "\x00", "")
	q := "'" + strings.ReplaceAll(s, "'", "''") + "'"
	if strings.Contains(s, `\`) {
		q = "E" + strings.ReplaceAll(q, `\`, `\\`)
	}
	return q
}

// sqlGen generates the SQL of one aggregate. Aliases are t0, t1, … in the
// order nodes are visited, and j<n> for the join table of node t<n>.
type sqlGen struct {
	b      strings.Builder
	next   int
	indent int
	// shared, when not nil, collects the many-to-one relations whose
	// objects Shared statements build once per batch (see sharedRef),
	// and a marker goes in their place. Nil outside keyed arrays and in
	// the Shared statements.
	shared *[]*Shared
	// batch collects them for the whole statement; shared is set to it
	// inside keyed arrays.
	batch *[]*Shared
}

func (g *sqlGen) alias() string {
	a := "t" + strconv.Itoa(g.next)
	g.next++
	return a
}

func col(alias, column string) string { return alias + "." + ident(column) }

// keyMatch is the WHERE condition matching cols of alias against the
// parameters $first…, one text[] per column.
func keyMatch(alias string, cols, types []string, first int) string {
	if len(cols) == 1 {
		return fmt.Sprintf("%s = ANY($%d::text[]::%s[])", col(alias, cols[0]), first, types[0])
	}
	lhs := make([]string, len(cols))
	arrs := make([]string, len(cols))
	for i, c := range cols {
		lhs[i] = col(alias, c)
		arrs[i] = fmt.Sprintf("$%d::text[]::%s[]", first+i, types[i])
	}
	return fmt.Sprintf("(%s) IN (SELECT * FROM unnest(%s))", strings.Join(lhs, ", "), strings.Join(arrs, ", "))
}

func params(cols, types []string) []ParamSpec {
	ps := make([]ParamSpec, len(cols))
	for i := range cols {
		ps[i] = ParamSpec{Column: cols[i], Type: types[i]}
	}
	return ps
}

func (g *sqlGen) nl() string { return "\n" + strings.Repeat("  ", g.indent) }

// buildQuery generates Aggregate.Build.
func buildQuery(a *Aggregate) *Query {
	g := &sqlGen{}
	t0 := g.alias()
	g.indent = 1
	doc := g.object(a.Root, t0)
	return rootQuery(a, t0, ",\n  "+doc+" AS doc")
}

// batchQuery generates Aggregate.Batch and Aggregate.Shared: the build
// statement with a marker in place of each shared relation's object, and
// the statements that build those objects. Nil when no relation is
// shared.
func batchQuery(a *Aggregate) (*Query, []*Shared) {
	var shared []*Shared
	g := &sqlGen{batch: &shared}
	t0 := g.alias()
	g.indent = 1
	doc := g.object(a.Root, t0)
	if len(shared) == 0 {
		return nil, nil
	}
	return rootQuery(a, t0, ",\n  "+doc+" AS doc"), shared
}

// rootsQuery generates Aggregate.Roots: the build statement without the
// document.
func rootsQuery(a *Aggregate) *Query { return rootQuery(a, "t0", "") }

// rootQuery selects the id columns, then extra, of the root rows (as
// alias) whose ids are in the parameters and which the root's filter
// keeps.
func rootQuery(a *Aggregate, alias, extra string) *Query {
	sel := make([]string, len(a.ID))
	for i, c := range a.ID {
		sel[i] = fmt.Sprintf("to_jsonb(%s) AS %s", col(alias, c), ident(c))
	}
	where := keyMatch(alias, a.ID, a.IDTypes, 1)
	if a.Root.Where != "" {
		// A root row the filter leaves out has no document: the build
		// statement returns no row for its id, and the build stage
		// deletes the document.
		where += "\n  AND (" + a.Root.Where + ")"
	}
	sql := fmt.Sprintf("SELECT %s%s\nFROM %s AS %s\nWHERE %s",
		strings.Join(sel, ", "), extra, a.Table.Sanitize(), alias, where)
	return &Query{SQL: sql, Params: params(a.ID, a.IDTypes)}
}

// object returns the JSON text of one row of n, read from alias: a text
// expression that is never NULL. Documents are concatenated as text, not
// built with json_build_object: on PostgreSQL 15 that looks up the type
// category and output function of every argument on every call, which
// made the demo's build statement about a third more expensive in the
// backend (docs/performance.md, eighteenth pass). Each value goes through
// to_json, the encoding json_build_object uses, except integers and
// booleans, whose text is their JSON. Keys keep the mapping's order.
func (g *sqlGen) object(n *Node, alias string) string {
	if n.Value != "" {
		return valueText(n, alias, n.Value)
	}
	type pair struct{ key, value string }
	var pairs []pair
	for _, c := range n.Columns {
		pairs = append(pairs, pair{n.OutputName(c), valueText(n, alias, c)})
	}
	for _, f := range n.Fields {
		pairs = append(pairs, pair{f.Name, g.field(f, alias)})
	}
	for _, c := range n.Children {
		pairs = append(pairs, pair{c.Name, g.relation(c, alias)})
	}
	if len(pairs) == 0 {
		return "'{}'"
	}
	var b strings.Builder
	open := "{"
	for i, p := range pairs {
		if i > 0 {
			b.WriteString(g.nl() + "  || ")
		}
		b.WriteString(literal(open+jsonString(p.key)+":") + " || " + p.value)
		open = ","
	}
	b.WriteString(" || '}'")
	return b.String()
}

// jsonString is s as a JSON string.
func jsonString(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(b.String(), "\n")
}

// valueText is column c of alias as JSON text, never NULL.
func valueText(n *Node, alias, c string) string {
	v, notNull := columnJSON(n, alias, c)
	if notNull {
		return v
	}
	return "COALESCE(" + v + ", 'null')"
}

// columnJSON is column c of alias (a row of n) as JSON text, NULL when
// the value is, and whether the column is NOT NULL. json columns (and
// arrays of them) go through jsonb, which drops duplicate keys and
// normalizes them as to_jsonb does; to_json would keep their text
// verbatim.
func columnJSON(n *Node, alias, c string) (string, bool) {
	v := "to_json(" + col(alias, c) + ")::text"
	notNull := false
	if n.table != nil {
		if tc := n.table.Column(c); tc != nil {
			notNull = tc.NotNull
			switch tc.BaseType {
			case "json":
				v = col(alias, c) + "::jsonb::text"
			case "json[]":
				v = "to_jsonb(" + col(alias, c) + ")::text"
			case "smallint", "integer", "bigint", "boolean":
				v = col(alias, c) + "::text"
			}
		}
	}
	return v, notNull
}

// spaced reports whether the JSON of n (its columns, computed keys and
// relations) may hold whitespace between tokens: only a value whose JSON
// text PostgreSQL prints spaced (json and jsonb, a type with its own cast
// to json such as hstore, a composite) or that an expression computes
// (of a type not known here). Every other value's JSON is a number, a
// boolean, null, a string or an array of those, and the objects and
// arrays decant's SQL writes around them have no whitespace.
func spaced(n *Node) bool {
	unspaced := func(t *Table, c string) bool {
		if t == nil {
			return false
		}
		tc := t.Column(c)
		if tc == nil {
			return false
		}
		if tc.ElemType != "" {
			switch tc.ElemType {
			case "smallint", "integer", "bigint", "numeric", "real", "double precision", "boolean",
				"text", "character varying", "character", "uuid", "date",
				"timestamp without time zone", "timestamp with time zone":
				return true
			}
			return false
		}
		switch tc.Category {
		case 'N', 'S', 'D', 'B', 'T', 'I', 'V', 'E', 'G', 'R':
			return true
		}
		return tc.BaseType == "uuid" || tc.BaseType == "bytea"
	}
	cols := n.Columns
	if n.Value != "" {
		cols = []string{n.Value}
	}
	for _, c := range cols {
		if !unspaced(n.table, c) {
			return true
		}
	}
	for _, f := range n.Fields {
		switch {
		case f.Expr != "":
			return true
		case f.Column != "" && !unspaced(f.Relation.table, f.Column):
			return true
		}
	}
	for _, c := range n.Children {
		if spaced(c) {
			return true
		}
	}
	return false
}

// field returns the value of a computed key of the row at alias: its
// expression as written (names resolve to that row's columns), or the
// aggregate over the relation's rows — the same rows, filter included,
// that the relation holds.
func (g *sqlGen) field(f Field, alias string) string {
	if f.Func == "" {
		// to_json cannot take an untyped literal; json_build_array takes
		// any value and encodes it as to_json does: its text without the
		// brackets.
		return "left(substr(json_build_array((" + f.Expr + "))::text, 2), -1)"
	}
	g.indent += 2
	defer func() { g.indent -= 2 }()
	child := g.alias()
	from, where := g.fromWhere(f.Relation, alias, child)
	arg := "*"
	if f.Column != "" {
		arg = col(child, f.Column)
	}
	return fmt.Sprintf("COALESCE(to_json((SELECT %s(%s) FROM %s WHERE %s))::text, 'null')", f.Func, arg, from, where)
}

// relation returns the JSON expression of child n of the row at parent.
func (g *sqlGen) relation(n *Node, parent string) string {
	if g.shared != nil && sharable(n) {
		return g.sharedRef(n, parent)
	}
	g.indent += 2
	defer func() { g.indent -= 2 }()
	alias := g.alias()
	outer, batch := g.shared, g.batch
	if n.Kind.IsArray() && g.batch != nil {
		// Inside an array a many-to-one's rows repeat from element to
		// element. Not when the elements themselves are the sort key
		// (a table without a key): a marker is not JSON, so none goes
		// anywhere below such an array.
		g.shared = g.batch
		if len(n.Key) == 0 {
			g.shared, g.batch = nil, nil
		}
	}
	elem := g.object(n, alias)
	g.shared, g.batch = outer, batch
	from, where := g.fromWhere(n, parent, alias)
	order := orderBy(n, alias, elem)
	nl := g.nl()
	switch {
	case n.Kind.IsArray():
		agg := "'[' || string_agg(" + elem + ", ','"
		if order != "" {
			agg += " ORDER BY " + order
		}
		agg += ") || ']'"
		return fmt.Sprintf("COALESCE((SELECT %s%sFROM %s%sWHERE %s), '[]')", agg, nl, from, nl, where)
	default:
		limit := ""
		if !n.unique {
			limit = nl + "ORDER BY " + order + " LIMIT 1"
		}
		return fmt.Sprintf("COALESCE((SELECT %s%sFROM %s%sWHERE %s%s), 'null')", elem, nl, from, nl, where, limit)
	}
}

// fromWhere joins the rows of n (as alias) to the parent row (as parent).
func (g *sqlGen) fromWhere(n *Node, parent, alias string) (string, string) {
	from := relationFrom(n, alias)
	var conds []string
	switch n.Kind {
	case OneToMany, OneToOne, ManyToOne:
		for i := range n.ChildColumns {
			conds = append(conds, col(alias, n.ChildColumns[i])+" = "+col(parent, n.ParentColumns[i]))
		}
	case ManyToMany:
		j := "j" + alias[1:]
		var on []string
		for i := range n.ChildColumns {
			on = append(on, col(alias, n.ChildColumns[i])+" = "+col(j, n.ThroughChildColumns[i]))
		}
		from = n.Through.Sanitize() + " AS " + j + " JOIN " + from + " ON " + strings.Join(on, " AND ")
		for i := range n.ParentColumns {
			conds = append(conds, col(j, n.ThroughParentColumns[i])+" = "+col(parent, n.ParentColumns[i]))
		}
	}
	return from, strings.Join(conds, " AND ")
}

// relationFrom is n's table as alias, with n's filter applied.
func relationFrom(n *Node, alias string) string {
	if n.Where != "" {
		// The filter sees the relation's own columns first, unqualified,
		// whatever the join table's are named.
		return "(SELECT * FROM " + n.Table.Sanitize() + " WHERE (" + n.Where + ")) AS " + alias
	}
	return n.Table.Sanitize() + " AS " + alias
}

// orderBy is the sort order of n's rows: order_by, then the primary key,
// or the element itself when the table has no primary key.
func orderBy(n *Node, alias, elem string) string {
	var keys []string
	used := map[string]bool{}
	for _, o := range n.OrderBy {
		k := col(alias, o.Column)
		if o.Desc {
			k += " DESC"
		}
		if o.Nulls != "" {
			k += " NULLS " + strings.ToUpper(o.Nulls)
		}
		keys = append(keys, k)
		used[o.Column] = true
	}
	if len(n.Key) == 0 { // no key: the element itself breaks ties (json has no order, jsonb does)
		return strings.Join(append(keys, "("+elem+")::jsonb"), ", ")
	}
	for _, c := range n.Key {
		if !used[c] {
			keys = append(keys, col(alias, c))
		}
	}
	return strings.Join(keys, ", ")
}
