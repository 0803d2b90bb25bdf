package main

import (
	"context"
	"fmt"
	"os"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/mappings"
)

// checkReport prints the report of check, as JSON or as text, and returns
// 1 when it found an error.
func checkReport(ctx context.Context, c *call, asJSON bool) int {
	report := mappings.NewReport(check(ctx, c.configPath))
	if asJSON {
		writeJSON(c.stdout, report)
	} else {
		report.WriteText(c.stdout)
	}
	if !report.OK {
		return 1
	}
	return 0
}

// check runs every check it can and returns the problems and the names of
// the aggregates that bound.
func check(ctx context.Context, configPath string) ([]mappings.Problem, []string) {
	problem := func(err error) []mappings.Problem {
		return []mappings.Problem{{Severity: mappings.SeverityError, Message: err.Error()}}
	}
	cfg, err := config.Load(configPath, os.Environ())
	if err != nil {
		return problem(err), nil
	}
	paths, err := cfg.MappingPaths()
	if err != nil {
		return problem(err), nil
	}
	set, err := mappings.LoadPaths(paths)
	if err != nil {
		return mappings.BindProblems(err), nil
	}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return problem(err), nil
	}
	defer conn.Close(context.Background())
	problems, names, err := mappings.CheckLive(ctx, conn, set, cfg.Postgres.Publication, cfg.Postgres.Slot, cfg.Postgres.CreatePublication)
	if err != nil {
		return append(problems, problem(err)...), nil
	}
	return append(problems, checkSearch(ctx, cfg)...), names
}

// checkSearch asks each configured search engine what it is: the wrong
// kind under a section, an unsupported version or no answer are errors; a
// version decant is not tested against here is a warning.
func checkSearch(ctx context.Context, cfg *config.Config) []mappings.Problem {
	engines, err := indexer.Engines(cfg)
	if err != nil {
		return []mappings.Problem{{Severity: mappings.SeverityError, Message: err.Error()}}
	}
	var out []mappings.Problem
	for _, e := range engines {
		info, err := e.Check(ctx)
		switch {
		case err != nil:
			out = append(out, mappings.Problem{Severity: mappings.SeverityError, Message: err.Error()})
		case !indexer.Tested(info):
			out = append(out, mappings.Problem{Severity: mappings.SeverityWarning, Message: fmt.Sprintf(
				"%s.urls: %s %s is supported by API contract only, not tested with decant (tested: Elasticsearch 7.17, OpenSearch 2.19 and 3.x; see docs/operations.md#supported-versions)",
				e.Kind, info.Kind, info.Version)})
		}
	}
	return out
}
