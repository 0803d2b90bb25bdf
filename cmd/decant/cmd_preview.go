package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/decant-cdc/decant/resolver"
)

func init() {
	register("preview", "print the document of one aggregate id as it would be indexed", runPreview)
}

const previewHelp = `Usage: decant preview <aggregate> <id> [--config decant.yaml]

Builds the document of one id with the same statement and version rule as
the build stage and prints its envelope (as written to the aggregate topic)
as indented JSON. Nothing is written anywhere. An id without a root row
prints a deleted envelope (doc null).

The id is a JSON object naming every id column, or a bare value when the
id has one column.

Examples:
  decant preview customer 7
  decant preview customer '{"id":7}'
  decant preview order_line '{"order_id":7,"line_no":2}'
  decant preview customer 7 | jq .doc.orders

Flags:
`

func runPreview(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("preview", previewHelp, stderr)
	configPath := configFlag(fs)
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if !wantArgs(stderr, "preview", pos, 2, `give an aggregate and an id, e.g. decant preview customer '{"id":7}'`) {
		return 2
	}
	st, err := openStack(ctx, *configPath, "decant-preview", stderr)
	if err != nil {
		return fail(stderr, "preview", 1, err)
	}
	defer st.close()
	a, err := st.model.FindAggregate(pos[0])
	if err != nil {
		return fail(stderr, "preview", 1, err)
	}
	key, err := resolver.ParseID(a, pos[1])
	if err != nil {
		return fail(stderr, "preview", 2, err)
	}
	doc, err := resolver.Preview(ctx, st.pool, a, key)
	if err != nil {
		return fail(stderr, "preview", 1, err)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return fail(stderr, "preview", 1, err)
	}
	fmt.Fprintln(stdout, string(out))
	return 0
}
