package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
)

func init() {
	register("init", "write a starting mapping from the database's foreign keys", runInit)
}

type stringsFlag []string

func (s *stringsFlag) String() string     { return strings.Join(*s, ",") }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }

func runInit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("init", stderr)
	configPath := configFlag(fs)
	var opts mappings.InitOptions
	fs.StringVar(&opts.Schema, "schema", "public", "schema whose tables become aggregates")
	fs.Var((*stringsFlag)(&opts.Roots), "root", "root table of an aggregate (repeatable; schema.table allowed)")
	fs.IntVar(&opts.Depth, "depth", 3, "how deep one-to-many relations nest")
	out := fs.String("out", "", "write to this file instead of stdout (refuses to overwrite)")
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if !wantArgs(stderr, "init", pos, 0, "") {
		return 2
	}
	cfg, err := config.Load(*configPath, os.Environ())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return fail(stderr, "init", 1, err)
	}
	defer conn.Close(context.Background())
	cat, err := mappings.ReadCatalog(ctx, conn)
	if err != nil {
		return fail(stderr, "init", 1, err)
	}
	data, err := mappings.Init(cat, opts)
	if err != nil {
		return fail(stderr, "init", 1, err)
	}
	if *out == "" {
		_, _ = stdout.Write(data)
		return 0
	}
	if err := writeNew(*out, data); err != nil {
		return fail(stderr, "init", 1, err)
	}
	fmt.Fprintf(stderr, "wrote %s; review it, then run decant check\n", *out)
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
