package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/decant-cdc/decant/mappings"
)

// initFlags adds the flags of init and returns its body.
func initFlags(fs *flag.FlagSet) func(context.Context, *call) int {
	var opts mappings.InitOptions
	fs.StringVar(&opts.Schema, "schema", "public", "schema whose tables become aggregates")
	fs.Var((*stringsFlag)(&opts.Roots), "root", "root table of an aggregate (repeatable; schema.table allowed)")
	fs.IntVar(&opts.Depth, "depth", 3, "how deep one-to-many relations nest")
	out := fs.String("out", "", "write to this file instead of stdout (refuses to overwrite)")
	return func(ctx context.Context, c *call) int { return initMapping(ctx, c, opts, *out) }
}

type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func initMapping(ctx context.Context, c *call, opts mappings.InitOptions, out string) int {
	_, conn, code := c.connect(ctx)
	if conn == nil {
		return code
	}
	defer conn.Close(context.Background())
	cat, err := mappings.ReadCatalog(ctx, conn)
	if err != nil {
		return c.fail(1, err)
	}
	data, err := mappings.Init(cat, opts)
	if err != nil {
		return c.fail(1, err)
	}
	if out == "" {
		_, _ = c.stdout.Write(data)
		return 0
	}
	if err := writeNew(out, data); err != nil {
		return c.fail(1, err)
	}
	fmt.Fprintf(c.stderr, "wrote %s; review it, then run decant check\n", out)
	return 0
}

// writeNew writes data to a file that must not exist yet.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	return errors.Join(err, f.Close())
}
