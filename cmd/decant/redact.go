package main

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/decant-cdc/decant/config"
	"github.com/decant-cdc/decant/mappings"
)

// checkRedaction refuses streamer.redact rules that would break the
// pipeline or leak what they hide: a table that does not exist, a column
// it does not have, a primary key column (the raw topics are keyed by
// it), a column through which the map stage finds documents (it reads its
// value from the raw topic), and excluding or masking a column whose
// changes the map stage watches (it compares before and after: hash it
// instead, equal values stay equal). Every problem is reported.
func checkRedaction(cfg *config.Config, model *mappings.Model, cat *mappings.Catalog) error {
	tables := make([]string, 0, len(cfg.Streamer.Redact))
	for t := range cfg.Streamer.Redact {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	var errs []error
	for _, name := range tables {
		r := cfg.Streamer.Redact[name]
		key := "streamer.redact." + name
		schema, table, _ := strings.Cut(name, ".")
		tn := mappings.TableName{Schema: schema, Name: table}
		t := cat.Table(tn)
		if t == nil {
			errs = append(errs, fmt.Errorf("%s: no table %s in the database", key, name))
			continue
		}
		links, watched := map[string]string{}, map[string]string{}
		for _, rt := range model.RoutesFor(tn) {
			for _, c := range rt.From {
				links[c] = rt.Aggregate + " " + rt.Path
			}
			for _, c := range rt.Watch {
				watched[c] = rt.Aggregate + " " + rt.Path
			}
		}
		for _, l := range []struct {
			what string
			cols []string
		}{{"exclude", r.Exclude}, {"mask", r.Mask}, {"hash", r.Hash}} {
			for _, c := range l.cols {
				at := key + "." + l.what
				switch {
				case t.Column(c) == nil:
					errs = append(errs, fmt.Errorf("%s: table %s has no column %q", at, name, c))
				case slices.Contains(t.PrimaryKey, c):
					errs = append(errs, fmt.Errorf("%s: column %q is part of the primary key of %s, which keys its raw topic: it cannot be redacted", at, c, name))
				case links[c] != "":
					errs = append(errs, fmt.Errorf("%s: column %q links rows of %s to their documents (%s): the map stage reads its value from the raw topic, so it cannot be redacted", at, c, name, links[c]))
				case l.what != "hash" && watched[c] != "":
					errs = append(errs, fmt.Errorf("%s: column %q is watched for changes (%s): the map stage compares its before and after values, which %s would hide; hash it instead (equal values keep equal hashes)", at, c, watched[c], map[string]string{"exclude": "excluding", "mask": "masking"}[l.what]))
				}
			}
		}
	}
	return errors.Join(errs...)
}
