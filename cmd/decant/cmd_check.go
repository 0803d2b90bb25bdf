package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
	"github.com/jackc/pgx/v5"
)

func init() {
	register("check", "check config and mappings against the live database", runCheck)
}

const checkHelp = `Usage: decant check [--config decant.yaml] [--json]

Loads the config and every mapping file, connects to PostgreSQL and reports
every problem with the SQL or command that fixes it: unknown tables and
columns, join column type mismatches, tables whose replica identity must be
FULL, tables missing from the publication, missing privileges (SELECT,
REPLICATION), wal_level, and join columns without an index (a warning).

Exit status: 0 when there is no error (warnings allowed), 1 otherwise,
2 for bad flags.

Examples:
  decant check
  decant check --config /etc/decant/decant.yaml
  decant check --json | jq '.problems[] | select(.severity == "error") | .fix'

Flags:
`

// configFlag adds the --config flag every subcommand shares.
func configFlag(fs *flag.FlagSet) *string {
	def := os.Getenv("DECANT_CONFIG")
	if def == "" {
		def = "decant.yaml"
	}
	return fs.String("config", def, "config file (env DECANT_CONFIG)")
}

// parseFlags parses args, allowing flags after positional arguments. It
// returns the positional arguments, or an exit status when it should stop.
func parseFlags(fs *flag.FlagSet, args []string) ([]string, int, bool) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, 0, false
			}
			return nil, 2, false
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, 0, true
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func newFlagSet(name, help string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), help)
		fs.PrintDefaults()
	}
	return fs
}

// mappingsFromConfig expands cfg.Mappings (globs relative to the config
// file) into sorted, distinct paths.
func mappingsFromConfig(cfg *config.Config) ([]string, error) {
	seen := map[string]bool{}
	var paths []string
	for _, pattern := range cfg.Mappings {
		p := pattern
		if !filepath.IsAbs(p) {
			p = filepath.Join(cfg.Dir, p)
		}
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("mappings: %q: %w", pattern, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("mappings: %q matches no file (relative to %s)", pattern, cfg.Dir)
		}
		sort.Strings(matches)
		for _, m := range matches {
			if !seen[m] {
				seen[m] = true
				paths = append(paths, m)
			}
		}
	}
	return paths, nil
}

// loadAndBind loads the config's mappings and binds them to the live
// catalog. On a mapping error it returns the Set error or the Bind error
// (with the partial model), and the catalog when it was read.
func loadAndBind(ctx context.Context, cfg *config.Config, conn *pgx.Conn) (*mappings.Model, *mappings.Catalog, error) {
	paths, err := mappingsFromConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	set, err := mappings.LoadPaths(paths)
	if err != nil {
		return nil, nil, err
	}
	cat, err := mappings.ReadCatalog(ctx, conn)
	if err != nil {
		return nil, nil, err
	}
	m, err := mappings.Bind(set, cat)
	return m, cat, err
}

func connectPG(ctx context.Context, cfg *config.Config) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, cfg.Postgres.DSN)
	if err != nil {
		return nil, fmt.Errorf("connecting to PostgreSQL at %s: %w", config.RedactDSN(cfg.Postgres.DSN), err)
	}
	return conn, nil
}

type checkReport struct {
	OK         bool               `json:"ok"`
	Aggregates []string           `json:"aggregates"`
	Errors     int                `json:"errors"`
	Warnings   int                `json:"warnings"`
	Problems   []mappings.Problem `json:"problems"`
}

func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", checkHelp, stderr)
	configPath := configFlag(fs)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	pos, code, ok := parseFlags(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		fmt.Fprintf(stderr, "decant check: unexpected argument %q\n", pos[0])
		return 2
	}
	report := checkReport{Aggregates: []string{}, Problems: []mappings.Problem{}}
	problems, names := check(ctx, *configPath)
	report.Problems = append(report.Problems, problems...)
	report.Aggregates = append(report.Aggregates, names...)
	for _, p := range report.Problems {
		if p.Severity == mappings.SeverityError {
			report.Errors++
		} else {
			report.Warnings++
		}
	}
	report.OK = report.Errors == 0
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(report)
	} else {
		for _, p := range report.Problems {
			fmt.Fprintln(stdout, p.String())
		}
		if report.OK {
			fmt.Fprintf(stdout, "ok: %d aggregate(s) checked, %d warning(s)\n", len(report.Aggregates), report.Warnings)
		} else {
			fmt.Fprintf(stdout, "%d error(s), %d warning(s)\n", report.Errors, report.Warnings)
		}
	}
	if !report.OK {
		return 1
	}
	return 0
}

// check runs every check it can and returns the problems and the names of
// the aggregates that bound.
func check(ctx context.Context, configPath string) ([]mappings.Problem, []string) {
	fail := func(err error) []mappings.Problem {
		return []mappings.Problem{{Severity: mappings.SeverityError, Message: err.Error()}}
	}
	cfg, err := config.Load(configPath, os.Environ())
	if err != nil {
		return fail(err), nil
	}
	paths, err := mappingsFromConfig(cfg)
	if err != nil {
		return fail(err), nil
	}
	set, err := mappings.LoadPaths(paths)
	if err != nil {
		return mappings.BindProblems(err), nil
	}
	conn, err := connectPG(ctx, cfg)
	if err != nil {
		return fail(err), nil
	}
	defer conn.Close(context.Background())
	cat, err := mappings.ReadCatalog(ctx, conn)
	if err != nil {
		return fail(err), nil
	}
	var problems []mappings.Problem
	model, err := mappings.Bind(set, cat)
	if err != nil {
		problems = mappings.BindProblems(err)
	}
	env, err := mappings.ReadCheckEnv(ctx, conn, cfg.Postgres.Publication, cfg.Postgres.Slot)
	if err != nil {
		return append(problems, fail(err)...), nil
	}
	env.CreatePublication = cfg.Postgres.CreatePublication
	problems = append(problems, mappings.Check(model, cat, env)...)
	var names []string
	for _, a := range model.Aggregates {
		names = append(names, a.Name)
	}
	return problems, names
}
