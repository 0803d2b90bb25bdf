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

func runPreview(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("preview", stderr)
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
