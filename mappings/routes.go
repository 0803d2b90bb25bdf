package mappings

import (
	"fmt"
	"slices"
	"strings"
)

// routes lists, for every node of a (and every join table), how a changed
// row of its table finds the aggregate ids whose documents contain it.
//
// The lookup walks from the root down to the node's parent (the "anchor")
// and matches the anchor's link columns against the changed row's From
// values. Fed with the before image it finds the documents that contained
// the row; fed with the after image, those that contain it now.
func routes(a *Aggregate) []*Route {
	var out []*Route
	var walk func(n *Node, chain []*Node)
	walk = func(n *Node, chain []*Node) {
		chain = append(chain[:len(chain):len(chain)], n)
		out = append(out, nodeRoute(a, n, chain))
		if n.Kind == ManyToMany {
			out = append(out, joinRoute(a, n, chain))
		}
		for _, c := range n.Children {
			walk(c, chain)
		}
	}
	walk(a.Root, nil)
	return out
}

func nodeRoute(a *Aggregate, n *Node, chain []*Node) *Route {
	r := &Route{Aggregate: a.Name, Table: n.Table, Path: n.Path, Node: n, Watch: watch(a, n)}
	parents := chain[:len(chain)-1]
	switch n.Kind {
	case Root:
		r.From = a.ID
	case OneToMany, OneToOne, ManyToOne:
		// The parent's link columns (its key for foreign_key, its reference
		// columns for references) hold the changed row's ChildColumns values.
		r.From, r.Lookup = lookup(a, parents, nil, n.ParentColumns, columnTypes(n.Parent.table, n.ParentColumns), n.ChildColumns)
	case ManyToMany:
		r.From, r.Lookup = lookup(a, parents, n, n.ThroughChildColumns, columnTypes(n.through, n.ThroughChildColumns), n.ChildColumns)
	}
	return r
}

// joinRoute is the route of a ManyToMany node's join table: a link row
// added or removed changes the parent's document.
func joinRoute(a *Aggregate, n *Node, chain []*Node) *Route {
	r := &Route{Aggregate: a.Name, Table: *n.Through, Path: n.Path + ".through", Node: n}
	r.Watch = orderedUnion(n.through, n.ThroughParentColumns, n.ThroughChildColumns)
	parents := chain[:len(chain)-1]
	r.From, r.Lookup = lookup(a, parents, nil, n.ParentColumns, columnTypes(n.Parent.table, n.ParentColumns), n.ThroughParentColumns)
	return r
}

// watch is every column of n's table whose change can change a document:
// mapped columns, link columns, and sort keys.
func watch(a *Aggregate, n *Node) []string {
	if n.Where != "" || slices.ContainsFunc(n.Fields, func(f Field) bool { return f.Expr != "" }) {
		// Which columns a filter or an expression reads is PostgreSQL's
		// to know: every column of the table is watched.
		return n.table.columnNames()
	}
	lists := [][]string{n.Columns, n.ChildColumns}
	if n.Parent != nil {
		// The parent's fields that aggregate this node's column.
		for _, f := range n.Parent.Fields {
			if f.Relation == n && f.Column != "" {
				lists = append(lists, []string{f.Column})
			}
		}
	}
	if n.Kind == Root {
		lists = append(lists, a.ID)
	}
	if n.Value != "" {
		lists = append(lists, []string{n.Value})
	}
	for _, c := range n.Children {
		lists = append(lists, c.ParentColumns)
	}
	for _, o := range n.OrderBy {
		lists = append(lists, []string{o.Column})
	}
	if n.Kind.IsArray() {
		lists = append(lists, n.Key)
	}
	return orderedUnion(n.table, lists...)
}

// orderedUnion returns the columns of t named in any of lists, in table order.
func orderedUnion(t *Table, lists ...[]string) []string {
	want := map[string]bool{}
	for _, l := range lists {
		for _, c := range l {
			want[c] = true
		}
	}
	var out []string
	for _, c := range t.Columns {
		if want[c.Name] {
			out = append(out, c.Name)
		}
	}
	return out
}

func columnTypes(t *Table, cols []string) []string {
	types := make([]string, len(cols))
	for i, c := range cols {
		types[i] = t.Column(c).BaseType
	}
	return types
}

// lookup builds the query that finds the aggregate ids whose chain of rows
// (root … last of chain) ends in a row whose condCols match the From values.
// When m2m is set, the condition is on m2m's join table, joined below the
// last node of chain. It returns From in parameter order and nil when the
// condition columns are the aggregate id itself.
func lookup(a *Aggregate, chain []*Node, m2m *Node, condCols, condTypes, from []string) ([]string, *Query) {
	if m2m == nil && len(chain) == 1 && sameSet(condCols, a.ID) {
		direct := make([]string, len(a.ID))
		for i, id := range a.ID {
			direct[i] = from[slices.Index(condCols, id)]
		}
		return direct, nil
	}
	var b strings.Builder
	b.WriteString("SELECT DISTINCT ")
	for i, c := range a.ID {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "to_jsonb(t0.%s) AS %s", ident(c), ident(c))
	}
	fmt.Fprintf(&b, "\nFROM %s AS t0", a.Table.Sanitize())
	alias := "t0"
	for i, n := range chain[1:] {
		parent := alias
		alias = fmt.Sprintf("t%d", i+1)
		if n.Kind == ManyToMany {
			j := "j" + alias[1:]
			fmt.Fprintf(&b, "\nJOIN %s AS %s ON %s", n.Through.Sanitize(), j, pairs(j, n.ThroughParentColumns, parent, n.ParentColumns))
			fmt.Fprintf(&b, "\nJOIN %s AS %s ON %s", n.Table.Sanitize(), alias, pairs(alias, n.ChildColumns, j, n.ThroughChildColumns))
			continue
		}
		fmt.Fprintf(&b, "\nJOIN %s AS %s ON %s", n.Table.Sanitize(), alias, pairs(alias, n.ChildColumns, parent, n.ParentColumns))
	}
	if m2m != nil {
		j := "j" + fmt.Sprint(len(chain))
		fmt.Fprintf(&b, "\nJOIN %s AS %s ON %s", m2m.Through.Sanitize(), j, pairs(j, m2m.ThroughParentColumns, alias, m2m.ParentColumns))
		alias = j
	}
	fmt.Fprintf(&b, "\nWHERE %s", keyMatch(alias, condCols, condTypes, 1))
	return from, &Query{SQL: b.String(), Params: params(from, condTypes)}
}

// pairs is "a.x1 = b.y1 AND a.x2 = b.y2".
func pairs(a string, xs []string, b string, ys []string) string {
	conds := make([]string, len(xs))
	for i := range xs {
		conds[i] = col(a, xs[i]) + " = " + col(b, ys[i])
	}
	return strings.Join(conds, " AND ")
}
