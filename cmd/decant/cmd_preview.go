package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/decant-cdc/decant/resolver"
)

var runPreview = register(command{name: "preview", summary: "print the document of one aggregate id as it would be indexed",
	nargs: 2, hint: `give an aggregate and an id, e.g. decant preview customer '{"id":7}'`, flags: noFlags(preview)})

func preview(ctx context.Context, c *call) int {
	st, err := c.openStack(ctx)
	if err != nil {
		return c.fail(1, err)
	}
	defer st.close()
	a, err := st.model.FindAggregate(c.args[0])
	if err != nil {
		return c.fail(1, err)
	}
	key, err := resolver.ParseID(a, c.args[1])
	if err != nil {
		return c.fail(2, err)
	}
	doc, err := resolver.Preview(ctx, st.pool, a, key)
	if err != nil {
		return c.fail(1, err)
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return c.fail(1, err)
	}
	fmt.Fprintln(c.stdout, string(out))
	return 0
}
