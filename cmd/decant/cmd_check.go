package main

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	problems = append(problems, checkFailover(ctx, cfg, conn)...)
	return append(problems, checkSearch(ctx, cfg)...), names
}

// checkFailover reads the replication settings of the server conn reached
// and of every other host postgres.dsn lists (each connected to directly,
// whatever its target_session_attrs), and returns the problems of
// failover slots (mappings.CheckFailover).
func checkFailover(ctx context.Context, cfg *config.Config, conn *pgx.Conn) []mappings.Problem {
	pcfg, err := pgx.ParseConfig(cfg.Postgres.DSN)
	if err != nil {
		return []mappings.Problem{{Severity: mappings.SeverityError, Message: "postgres.dsn: " + err.Error()}}
	}
	srv, err := mappings.ReadServerSettings(ctx, conn, conn.PgConn().Conn().RemoteAddr().String())
	if err != nil {
		return []mappings.Problem{{Severity: mappings.SeverityError, Message: err.Error()}}
	}
	// pgconn lists a host twice under sslmode=prefer (TLS, then plain):
	// the first of each address is kept.
	var hosts []*pgconn.FallbackConfig
	addrs := map[string]bool{}
	for _, h := range append([]*pgconn.FallbackConfig{{Host: pcfg.Host, Port: pcfg.Port, TLSConfig: pcfg.TLSConfig}}, pcfg.Fallbacks...) {
		addr := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))
		if !addrs[addr] {
			addrs[addr] = true
			hosts = append(hosts, h)
		}
	}
	env := mappings.FailoverEnv{SlotFailover: cfg.Streamer.SlotFailover, Server: srv, Hosts: len(hosts), TargetSessionAttrs: targetSessionAttrs(cfg.Postgres.DSN)}
	for _, h := range hosts {
		addr := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))
		one := pcfg.Copy()
		one.Host, one.Port, one.TLSConfig, one.Fallbacks, one.ValidateConnect = h.Host, h.Port, h.TLSConfig, nil, nil
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := pgx.ConnectConfig(cctx, one)
		if err != nil {
			cancel()
			env.Others = append(env.Others, mappings.ServerSettings{Addr: addr, Err: err.Error()})
			continue
		}
		s, err := mappings.ReadServerSettings(cctx, c, addr)
		c.Close(context.Background())
		cancel()
		switch {
		case err != nil:
			env.Others = append(env.Others, mappings.ServerSettings{Addr: addr, Err: err.Error()})
		case s.Instance != srv.Instance: // not the server conn is on
			env.Others = append(env.Others, s)
		}
	}
	return mappings.CheckFailover(env)
}

// targetSessionAttrs is postgres.dsn's target_session_attrs (URI or
// key=value form, else PGTARGETSESSIONATTRS); "" when not set.
func targetSessionAttrs(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		if u, err := url.Parse(dsn); err == nil {
			if v := u.Query().Get("target_session_attrs"); v != "" {
				return v
			}
		}
	} else if m := tsaKeyword.FindStringSubmatch(dsn); m != nil {
		return m[1]
	}
	return os.Getenv("PGTARGETSESSIONATTRS")
}

var tsaKeyword = regexp.MustCompile(`(?:^|\s)target_session_attrs\s*=\s*'?([a-z-]+)`)

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
