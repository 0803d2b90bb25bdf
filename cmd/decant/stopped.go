package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/opsapi"
	"github.com/decant-cdc/decant/resolver"
)

// stageStopped reports a stage that stopped because its SQL no longer
// matches the database (a *resolver.MappingError) and says so on /readyz;
// it returns false for any other error. The mappings are bound again to
// the live catalog, so the report names file:line:column of what broke.
// The other stages of the process go on: the stream stage keeps the slot
// moving, and the stopped stage's work waits in Kafka, uncommitted.
func stageStopped(ctx context.Context, log *slog.Logger, ops *opsapi.Server, cfg *config.Config, db mappings.Querier, name string, err error) bool {
	var me *resolver.MappingError
	if !errors.As(err, &me) {
		return false
	}
	problems := mappingProblems(ctx, cfg, db)
	why := me.Error()
	if len(problems) > 0 {
		why += "; decant check: " + strings.Join(problems, "; ")
	}
	log.Error("stage stopped: the mappings no longer match the database", "stage", name, "aggregate", me.Aggregate,
		"err", me.Err, "problems", strings.Join(problems, "; "), "fix", me.Fix())
	ops.StageStopped(name, why+"; fix: "+me.Fix())
	return true
}

// mappingProblems binds the mapping files to the live catalog and returns
// the problems found, as "file:line:column: message".
func mappingProblems(ctx context.Context, cfg *config.Config, db mappings.Querier) []string {
	paths, err := cfg.MappingPaths()
	if err != nil {
		return []string{err.Error()}
	}
	_, _, err = mappings.LoadAndBind(ctx, db, paths)
	if err == nil {
		return nil
	}
	var out []string
	for _, p := range mappings.BindProblems(err) {
		out = append(out, fmt.Sprintf("%s: %s", p.Where, p.Message))
	}
	return out
}
