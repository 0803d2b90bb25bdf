package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/decant-cdc/decant/resolver"
)

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
	doc, err := resolver.Preview(ctx, st.build, a, key)
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
