package mappings

import (
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// TableName is a schema-qualified table name.
type TableName struct {
	Schema, Name string
}

// String returns schema.name, unquoted, for messages.
func (t TableName) String() string { return t.Schema + "." + t.Name }

// Sanitize returns "schema"."name", quoted for SQL.
func (t TableName) Sanitize() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// Quoted is Sanitize.
func (t TableName) Quoted() string { return t.Sanitize() }

// Kind says how a node's rows attach to its parent's row.
type Kind int

const (
	// Root is the aggregate's own table.
	Root Kind = iota
	// OneToMany: the child rows point at the parent (foreign_key); an array.
	OneToMany
	// OneToOne: like OneToMany with `single: true`; an object or null.
	OneToOne
	// ManyToOne: the parent row points at the child (references); an object or null.
	ManyToOne
	// ManyToMany: rows of a join table link parent and child (through); an array.
	ManyToMany
)

var kindNames = [...]string{"root", "one-to-many", "one-to-one", "many-to-one", "many-to-many"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// IsArray reports whether the node gives a JSON array.
func (k Kind) IsArray() bool { return k == OneToMany || k == ManyToMany }

// Model is a set of mappings bound to a database catalog: every name
// resolved, every default filled in, every SQL statement generated.
// It is immutable and safe for concurrent use.
type Model struct {
	// Aggregates sorted by name.
	Aggregates []*Aggregate

	routes map[TableName][]*Route
	before map[TableName][]string
}

// Aggregate returns the named aggregate, or nil.
func (m *Model) Aggregate(name string) *Aggregate {
	i := sort.Search(len(m.Aggregates), func(i int) bool { return m.Aggregates[i].Name >= name })
	if i < len(m.Aggregates) && m.Aggregates[i].Name == name {
		return m.Aggregates[i]
	}
	return nil
}

// FindAggregate is Aggregate with an error that lists the names the
// mappings define.
func (m *Model) FindAggregate(name string) (*Aggregate, error) {
	if a := m.Aggregate(name); a != nil {
		return a, nil
	}
	return nil, fmt.Errorf("no aggregate %q; the mappings define: %s", name, strings.Join(m.AggregateNames(), ", "))
}

// AggregateNames lists the aggregates' names, sorted.
func (m *Model) AggregateNames() []string {
	names := make([]string, len(m.Aggregates))
	for i, a := range m.Aggregates {
		names[i] = a.Name
	}
	return names
}

// Tables returns every table the model reads (roots, relations and join
// tables), sorted.
func (m *Model) Tables() []TableName {
	out := make([]TableName, 0, len(m.routes))
	for t := range m.routes {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// RoutesFor returns the routes of every aggregate that uses table, in
// aggregate then path order. A change to a row of table must be resolved
// through each of them.
func (m *Model) RoutesFor(table TableName) []*Route { return m.routes[table] }

// NeedsBeforeImage returns the columns of table that resolution must read
// from the before image of updates and deletes (the From columns of its
// routes and both link columns of join tables), in column order. When they
// are not all in the table's replica identity, the table needs
// REPLICA IDENTITY FULL.
func (m *Model) NeedsBeforeImage(table TableName) []string { return m.before[table] }

// Aggregate is one bound aggregate.
type Aggregate struct {
	Name string
	// File is the mapping file that defines the aggregate.
	File  string
	Table TableName
	// ID are the aggregate id columns of the root table, in id order.
	ID []string
	// IDTypes are the BaseTypes of the id columns.
	IDTypes []string
	// Index is the Elasticsearch alias; default: Name.
	Index string
	Root  *Node
	// ESSettings and ESMappings are the YAML elasticsearch block, as written.
	ESSettings, ESMappings map[string]any
	// Build returns, for a batch of ids (Build.Args), one row per id that
	// exists: one jsonb column per id column, in id order, then the
	// document as the json column doc (spaced as PostgreSQL's json builders
	// print it; wire.AppendCompact compacts it). Missing ids return no row.
	Build *Query
	// Batch is Build with a marker in place of each shared relation's
	// object (a many-to-one inside an array), whose objects the Shared
	// statements build once per batch, in the same snapshot: what the
	// build stage runs. NewSharedSet splices them in. Nil when no
	// relation is shared.
	Batch  *Query
	Shared []*Shared
	// Spaced says whether Build's documents may hold whitespace between
	// tokens, which the build stage then removes (wire.AppendCompact):
	// when a value is json or jsonb, of a type with a cast of its own to
	// json, or computed by an expression. Otherwise they are compact as
	// built.
	Spaced bool
	// Roots returns, for a batch of ids (Roots.Args), one row per id whose
	// root row exists and passes the root's filter: one jsonb column per id
	// column, in id order — the ids that have a document.
	Roots *Query
	// Routes lists every place a table is used, root first, in path order.
	Routes []*Route
}

// Node is the root or one relation of an aggregate.
type Node struct {
	// Name is the relation name (its key in the parent's object); the
	// aggregate name for the root.
	Name string
	// Path is the key path in the mapping file: aggregates.customer.relations.orders.
	Path   string
	Kind   Kind
	Table  TableName
	Parent *Node
	// ParentColumns (in the parent's table) match ChildColumns (in this
	// node's table), pairwise: child.fk = parent.key for OneToMany and
	// OneToOne, parent.ref = child.key for ManyToOne. For ManyToMany they
	// match through the join table: Through.ThroughParentColumns =
	// parent.ParentColumns and Through.ThroughChildColumns = child.ChildColumns.
	ParentColumns []string
	ChildColumns  []string
	// Through is the join table of a ManyToMany node.
	Through              *TableName
	ThroughParentColumns []string
	ThroughChildColumns  []string
	// Key is the table's primary key: the last sort key of arrays. Empty
	// when the table has none (arrays are then sorted by their elements).
	Key []string
	// Columns are the mapped columns, in output order. Empty when Value is set.
	Columns []string
	// Rename maps a column to its key in the document.
	Rename  map[string]string
	OrderBy []OrderBy
	// Value, when set, makes the node a scalar (or scalar list) of this column.
	Value    string
	Children []*Node
	// Where, when set, is a SQL boolean over the node's row (the mapping's
	// where:, column names unqualified): the root rows that are documents,
	// or the rows of a relation that belong in it.
	Where string
	// Fields are the computed keys (fields:), after the columns, in file
	// order.
	Fields []Field

	table   *Table
	through *Table
	unique  bool // ChildColumns (or the join) select at most one row
	whereAt pos  // where: in its file, for problems with it
}

// DocumentSQL lists the SQL of the aggregate's filters (where:) and
// computed fields (fields:), node by node in tree order ("path.where:
// SQL", "path.fields.name: SQL"): what changes which documents exist and
// what they hold without changing the index mapping. The index hash
// covers it, so a changed filter or expression is reindexed like a
// changed mapping. Empty when the aggregate has neither.
func (a *Aggregate) DocumentSQL() []string {
	var out []string
	var walk func(n *Node)
	walk = func(n *Node) {
		if n.Where != "" {
			out = append(out, n.Path+".where: "+n.Where)
		}
		for _, f := range n.Fields {
			switch {
			case f.Expr != "":
				out = append(out, n.Path+".fields."+f.Name+": "+f.Expr)
			case f.Relation != nil && f.Column == "":
				out = append(out, n.Path+".fields."+f.Name+": "+f.Func+"("+f.Relation.Name+")")
			case f.Relation != nil:
				out = append(out, n.Path+".fields."+f.Name+": "+f.Func+"("+f.Relation.Name+"."+f.Column+")")
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(a.Root)
	return out
}

// Field is one computed document key: Expr, a SQL expression over the
// node's row (column names unqualified), or Func (count, max, min, sum,
// avg) over the child node Relation (and its Column).
type Field struct {
	Name     string
	Expr     string
	Func     string
	Relation *Node
	Column   string
	// Type is the PostgreSQL type of the value (format_type), for the
	// Elasticsearch mapping; CheckSQL fills it from the database ("" until
	// then: the property is left to dynamic mapping).
	Type string
	at   pos
}

// OrderBy is one sort key of an array.
type OrderBy struct {
	Column string
	Desc   bool
	// Nulls is "", "first" or "last".
	Nulls string
}

// OutputName returns the document key of a column.
func (n *Node) OutputName(col string) string {
	if to, ok := n.Rename[col]; ok {
		return to
	}
	return col
}

// Route says how a change to one table used at one node finds the
// affected aggregate ids.
type Route struct {
	Aggregate string
	Table     TableName
	// Path is the node's path; a join table's route ends in ".through".
	Path string
	Node *Node
	// Watch are the columns whose change matters: an update that changes
	// none of them (in before and after) affects no document through this route.
	Watch []string
	// From are the columns of the changed row whose values feed Lookup.
	// Resolve both the before and the after image.
	From []string
	// Lookup turns batches of From values (Lookup.Args) into DISTINCT
	// aggregate ids: one jsonb column per id column, in id order. Nil when
	// the From values are the aggregate ids themselves, in id order.
	Lookup *Query
}
