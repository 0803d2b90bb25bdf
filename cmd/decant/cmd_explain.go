package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/decant-cdc/decant/config"
)

func init() {
	register("explain", "print the generated SQL of an aggregate (build and routes)", runExplain)
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("explain", stderr)
	configPath := configFlag(fs)
	index := fs.Bool("index", false, "print the Elasticsearch index settings and mapping")
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if !wantArgs(stderr, "explain", pos, 1, "name one aggregate, e.g. decant explain customer") {
		return 2
	}
	cfg, err := config.Load(*configPath, os.Environ())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return fail(stderr, "explain", 1, err)
	}
	defer conn.Close(context.Background())
	model, _, err := loadAndBind(ctx, cfg, conn)
	if err != nil && model == nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	a, aerr := model.FindAggregate(pos[0])
	if aerr != nil {
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		return fail(stderr, "explain", 1, aerr)
	}
	if *index {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"index": a.Index, "settings": a.IndexSettings(), "mappings": a.IndexMapping()})
		return 0
	}
	fmt.Fprint(stdout, a.Explain())
	return 0
}
