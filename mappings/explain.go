package mappings

import (
	"fmt"
	"strings"
)

// Explain returns the aggregate's generated SQL as a commented SQL script:
// the build statement, then every route with its lookup statement. It is
// what `decant explain` prints.
func (a *Aggregate) Explain() string {
	var b strings.Builder
	fmt.Fprintf(&b, "-- aggregate %s: root table %s, id (%s), index %s, defined in %s\n", a.Name, a.Table, strings.Join(a.ID, ", "), a.Index, a.File)
	fmt.Fprintf(&b, "\n-- build: one row per existing id: the id columns as jsonb, then the document.\n")
	writeParams(&b, a.Build)
	fmt.Fprintf(&b, "%s;\n", a.Build.SQL)
	if a.Batch != nil {
		fmt.Fprintf(&b, "\n-- batch build, what the build stage runs: the build statement with a marker in place of\n")
		fmt.Fprintf(&b, "-- each shared object (a many-to-one inside an array), then in the same snapshot one statement\n")
		fmt.Fprintf(&b, "-- per shared relation that builds each object the batch refers to once; decant splices them in.\n")
		writeParams(&b, a.Batch)
		fmt.Fprintf(&b, "%s;\n", a.Batch.SQL)
		for i, sh := range a.Shared {
			fmt.Fprintf(&b, "\n-- shared object %d, %s: one row per referencing value that names a row: its position, the object.\n", i, sh.Node.Path)
			writeParams(&b, sh.Query)
			fmt.Fprintf(&b, "%s;\n", sh.Query.SQL)
		}
	}
	for _, r := range a.Routes {
		fmt.Fprintf(&b, "\n-- route %s: changes to %s (%s)\n", r.Path, r.Table, r.Node.Kind)
		fmt.Fprintf(&b, "--   watch: %s\n", strings.Join(r.Watch, ", "))
		if r.Lookup == nil {
			fmt.Fprintf(&b, "--   direct: the aggregate id is (%s) of the before and after images\n", strings.Join(r.From, ", "))
			continue
		}
		fmt.Fprintf(&b, "--   lookup from (%s) of the before and after images:\n", strings.Join(r.From, ", "))
		writeParams(&b, r.Lookup)
		fmt.Fprintf(&b, "%s;\n", r.Lookup.SQL)
	}
	return b.String()
}

func writeParams(b *strings.Builder, q *Query) {
	for i, p := range q.Params {
		fmt.Fprintf(b, "--   $%d: text[] of %s values, cast to %s\n", i+1, p.Column, p.Type)
	}
}
