package mappings

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Severity of a Problem: errors make `decant check` fail; warnings do not.
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Problem is one thing `decant check` found, with what fixes it.
type Problem struct {
	Severity Severity `json:"severity"`
	// Table is schema.name, when the problem is about one table.
	Table string `json:"table,omitempty"`
	// Where is file:line:column, when the problem is in a mapping file.
	Where   string `json:"where,omitempty"`
	Message string `json:"message"`
	// Fix is the SQL or command that fixes the problem, or what to edit.
	Fix string `json:"fix,omitempty"`
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(string(p.Severity))
	b.WriteString(": ")
	if p.Where != "" {
		b.WriteString(p.Where + ": ")
	}
	if p.Table != "" {
		b.WriteString(p.Table + ": ")
	}
	b.WriteString(p.Message)
	if p.Fix != "" {
		b.WriteString("\n    fix: " + strings.ReplaceAll(p.Fix, "\n", "\n         "))
	}
	return b.String()
}

// CheckEnv is what Check needs to know about the server beyond the catalog.
// ReadCheckEnv fills it.
type CheckEnv struct {
	User        string
	Superuser   bool
	Replication bool // the role has the REPLICATION attribute
	WALLevel    string

	Publication       string
	PublicationExists bool
	// CreatePublication: decant creates a missing publication itself
	// (config postgres.create_publication), so its absence is a warning.
	CreatePublication bool
	// PublicationTables are the tables the publication publishes (all of
	// them for FOR ALL TABLES).
	PublicationTables []TableName
	// PublicationActions are those of insert, update, delete and truncate
	// the publication publishes.
	PublicationActions []string

	Slot         string
	SlotExists   bool
	SlotPlugin   string
	SlotDatabase string
	Database     string

	// CanSelect holds the tables (and views) the user may SELECT from,
	// USAGE on their schema included.
	CanSelect map[TableName]bool

	// ServerVersionNum is server_version_num (0: unknown).
	ServerVersionNum int
	// Standby: postgres.dsn points at a hot standby (pg_is_in_recovery()).
	// Then HotStandbyFeedback and PrimarySlotName are its settings.
	Standby            bool
	HotStandbyFeedback string
	PrimarySlotName    string
}

// Report is what `decant check` prints (its --json output): every
// problem, counted, and the aggregates that bound.
type Report struct {
	OK         bool      `json:"ok"`
	Aggregates []string  `json:"aggregates"`
	Errors     int       `json:"errors"`
	Warnings   int       `json:"warnings"`
	Problems   []Problem `json:"problems"`
}

// NewReport counts problems; OK means no error (warnings allowed).
func NewReport(problems []Problem, aggregates []string) Report {
	r := Report{Aggregates: append([]string{}, aggregates...), Problems: append([]Problem{}, problems...)}
	for _, p := range problems {
		if p.Severity == SeverityError {
			r.Errors++
		} else {
			r.Warnings++
		}
	}
	r.OK = r.Errors == 0
	return r
}

// WriteText writes one block per problem and a summary line.
func (r Report) WriteText(w io.Writer) {
	for _, p := range r.Problems {
		fmt.Fprintln(w, p.String())
	}
	if r.OK {
		fmt.Fprintf(w, "ok: %d aggregate(s) checked, %d warning(s)\n", len(r.Aggregates), r.Warnings)
	} else {
		fmt.Fprintf(w, "%d error(s), %d warning(s)\n", r.Errors, r.Warnings)
	}
}

// Check compares a bound model with the catalog and the server settings
// and returns every problem found, errors first. It is pure.
func Check(model *Model, cat *Catalog, env CheckEnv) []Problem {
	var ps []Problem
	add := func(sev Severity, table, fix, format string, a ...any) {
		ps = append(ps, Problem{Severity: sev, Table: table, Message: fmt.Sprintf(format, a...), Fix: fix})
	}
	role := pgx.Identifier{env.User}.Sanitize()
	if env.WALLevel != "" && env.WALLevel != "logical" {
		add(SeverityError, "", "ALTER SYSTEM SET wal_level = logical;  -- then restart PostgreSQL",
			"wal_level is %s; logical replication needs wal_level = logical", env.WALLevel)
	}
	if env.Standby {
		checkStandby(env, add)
	}
	if !env.Superuser && !env.Replication {
		add(SeverityError, "", fmt.Sprintf("ALTER ROLE %s REPLICATION;", role),
			"role %s may not stream changes: it lacks the REPLICATION attribute", env.User)
	}
	if env.SlotExists {
		if env.SlotPlugin != "pgoutput" {
			add(SeverityError, "", fmt.Sprintf("SELECT pg_drop_replication_slot(%s);  -- or set postgres.slot to another name", literal(env.Slot)),
				"replication slot %s uses plugin %s; decant needs pgoutput", env.Slot, env.SlotPlugin)
		}
		if env.SlotDatabase != "" && env.Database != "" && env.SlotDatabase != env.Database {
			add(SeverityError, "", "set postgres.slot to a slot name unused by other databases",
				"replication slot %s belongs to database %s, not %s", env.Slot, env.SlotDatabase, env.Database)
		}
	}
	tables := model.Tables()
	published := map[TableName]bool{}
	for _, t := range env.PublicationTables {
		published[t] = true
	}
	pub := pgx.Identifier{env.Publication}.Sanitize()
	if !env.PublicationExists {
		names := make([]string, len(tables))
		for i, t := range tables {
			names[i] = t.Sanitize()
		}
		fix := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s;", pub, strings.Join(names, ", "))
		if env.Standby { // read-only: decant cannot create it there
			add(SeverityError, "", fix+"  -- on the primary", "publication %s does not exist, and postgres.dsn is a standby, where decant cannot create it", env.Publication)
		} else if env.CreatePublication {
			add(SeverityWarning, "", fix, "publication %s does not exist; decant will create it for the mapped tables (postgres.create_publication), which needs ownership of them", env.Publication)
		} else {
			add(SeverityError, "", fix, "publication %s does not exist and postgres.create_publication is false", env.Publication)
		}
	} else {
		var missing []string
		for _, a := range []string{"insert", "update", "delete", "truncate"} {
			if !slices.Contains(env.PublicationActions, a) {
				missing = append(missing, a)
			}
		}
		if len(missing) > 0 {
			add(SeverityError, "", fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate');", pub),
				"publication %s does not publish %s", env.Publication, strings.Join(missing, ", "))
		}
	}
	for _, tn := range tables {
		t := cat.Table(tn)
		name := tn.String()
		if t == nil {
			add(SeverityError, name, "create the table, or fix the mapping", "table does not exist")
			continue
		}
		if t.Kind != 'r' && t.Kind != 'p' {
			add(SeverityError, name, "map a table instead: logical replication publishes only tables",
				"is a %s, not a table: its changes cannot be streamed", relkindName(t.Kind))
		}
		if env.CanSelect != nil && !env.CanSelect[tn] {
			add(SeverityError, name, fmt.Sprintf("GRANT USAGE ON SCHEMA %s TO %s;\nGRANT SELECT ON %s TO %s;", pgx.Identifier{tn.Schema}.Sanitize(), role, tn.Sanitize(), role),
				"role %s may not SELECT from it (snapshots and document builds read it)", env.User)
		}
		if env.PublicationExists && !published[tn] {
			if env.CreatePublication && !env.Standby {
				add(SeverityWarning, name, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s;", pub, tn.Sanitize()),
					"is not in publication %s: decant run adds it (postgres.create_publication) and snapshots it online, which needs ownership of it", env.Publication)
			} else {
				add(SeverityError, name, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s;", pub, tn.Sanitize()),
					"is not in publication %s: its changes would not be streamed", env.Publication)
			}
		}
		if need, lacking := beforeImageLacks(model, tn, t); len(lacking) > 0 {
			add(SeverityError, name, fmt.Sprintf("ALTER TABLE %s REPLICA IDENTITY FULL;", tn.Sanitize()),
				"resolution reads %s from the before image of updates and deletes, but replica identity %s does not carry %s",
				strings.Join(need, ", "), identityName(t), strings.Join(lacking, ", "))
		}
	}
	for _, ix := range model.lookupColumns() {
		t := cat.Table(ix.table)
		if t == nil || t.hasIndexOn(ix.cols) {
			continue
		}
		quoted := make([]string, len(ix.cols))
		for i, c := range ix.cols {
			quoted[i] = ident(c)
		}
		add(SeverityWarning, ix.table.String(), fmt.Sprintf("CREATE INDEX ON %s (%s);", ix.table.Sanitize(), strings.Join(quoted, ", ")),
			"no index starts with (%s), which %s looks up: every lookup scans the table", strings.Join(ix.cols, ", "), ix.why)
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Severity == SeverityError && ps[j].Severity != SeverityError })
	return ps
}

// beforeImageLacks is the before-image rule: the columns resolution reads
// from the before image of t's updates and deletes (need), and those of
// them its replica identity does not carry (lacking). Without them, the
// documents a row used to belong to would never be rebuilt (PRODUCT.md §4).
func beforeImageLacks(model *Model, tn TableName, t *Table) (need, lacking []string) {
	need = model.NeedsBeforeImage(tn)
	for _, c := range need {
		if !slices.Contains(t.IdentityColumns, c) {
			lacking = append(lacking, c)
		}
	}
	return need, lacking
}

// RequireBeforeImages is the map stage's start-up form of the before-image
// rule Check reports: an error listing every table whose before image
// lacks columns resolution needs, with the fix; nil when none does.
func RequireBeforeImages(model *Model, cat *Catalog) error {
	var problems []string
	for _, tn := range model.Tables() {
		t := cat.Table(tn)
		if t == nil {
			continue
		}
		if _, missing := beforeImageLacks(model, tn, t); len(missing) > 0 {
			problems = append(problems, fmt.Sprintf("  table %s: updates and deletes do not carry %v in their before image; fix: ALTER TABLE %s REPLICA IDENTITY FULL;",
				tn, missing, tn.Sanitize()))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("the map stage cannot find the documents a changed row used to belong to:\n%s\n(decant check lists every problem)", strings.Join(problems, "\n"))
}

// BindProblems turns the ErrorList of Load or Bind into problems.
func BindProblems(err error) []Problem {
	var list ErrorList
	if !errors.As(err, &list) {
		return []Problem{{Severity: SeverityError, Message: err.Error()}}
	}
	ps := make([]Problem, len(list))
	for i, e := range list {
		where := e.File
		if e.Line > 0 {
			where = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
		}
		msg := e.Msg
		if e.Path != "" {
			msg = e.Path + ": " + msg
		}
		fix := e.Fix
		if fix == "" {
			fix = "edit " + where
		}
		ps[i] = Problem{Severity: SeverityError, Where: where, Message: msg, Fix: fix}
	}
	return ps
}

func relkindName(k byte) string {
	switch k {
	case 'v':
		return "view"
	case 'm':
		return "materialized view"
	case 'f':
		return "foreign table"
	}
	return fmt.Sprintf("relation of kind %q", k)
}

func identityName(t *Table) string {
	switch t.ReplicaIdentity {
	case 'd':
		if len(t.PrimaryKey) == 0 {
			return "DEFAULT (no primary key)"
		}
		return "DEFAULT (primary key " + strings.Join(t.PrimaryKey, ", ") + ")"
	case 'i':
		return "USING INDEX (" + strings.Join(t.IdentityColumns, ", ") + ")"
	case 'n':
		return "NOTHING"
	}
	return "FULL"
}

type lookupIndex struct {
	table TableName
	cols  []string
	why   string
}

// lookupColumns lists the columns that build and lookup queries search by,
// per table, so Check can ask for an index on each.
func (m *Model) lookupColumns() []lookupIndex {
	var out []lookupIndex
	seen := map[string]bool{}
	add := func(t TableName, cols []string, why string) {
		k := t.String() + "(" + strings.Join(cols, ",") + ")"
		if len(cols) == 0 || seen[k] {
			return
		}
		seen[k] = true
		out = append(out, lookupIndex{t, cols, why})
	}
	for _, a := range m.Aggregates {
		add(a.Table, a.ID, "the build of "+a.Name)
		var walk func(n *Node)
		walk = func(n *Node) {
			for _, c := range n.Children {
				switch c.Kind {
				case OneToMany, OneToOne:
					add(c.Table, c.ChildColumns, "the build of "+c.Path)
				case ManyToOne:
					add(c.Table, c.ChildColumns, "the build of "+c.Path)
					add(n.Table, c.ParentColumns, "the route of "+c.Path)
				case ManyToMany:
					add(*c.Through, c.ThroughParentColumns, "the build of "+c.Path)
					add(*c.Through, c.ThroughChildColumns, "the route of "+c.Path)
					add(c.Table, c.ChildColumns, "the build of "+c.Path)
				}
				walk(c)
			}
		}
		walk(a.Root)
	}
	return out
}

// checkStandby adds the problems of decoding on a hot standby: a version
// that cannot, and the settings without which the primary removes catalog
// rows the standby's slot still needs (PostgreSQL then invalidates the
// slot, and decant must snapshot again).
func checkStandby(env CheckEnv, add func(sev Severity, table, fix, format string, a ...any)) {
	if env.ServerVersionNum > 0 && env.ServerVersionNum < 160000 {
		add(SeverityError, "", "point postgres.dsn at the primary, or upgrade to PostgreSQL 16+",
			"postgres.dsn is a standby of PostgreSQL %d.%d; logical decoding on a standby needs PostgreSQL 16+", env.ServerVersionNum/10000, env.ServerVersionNum%10000)
		return
	}
	if env.HotStandbyFeedback != "on" {
		add(SeverityError, "", "ALTER SYSTEM SET hot_standby_feedback = on;  -- on the standby\nSELECT pg_reload_conf();",
			"postgres.dsn is a standby with hot_standby_feedback = %s: the primary may vacuum away catalog rows the slot needs, and PostgreSQL then invalidates the slot", env.HotStandbyFeedback)
	}
	if env.PrimarySlotName == "" {
		add(SeverityWarning, "", "SELECT pg_create_physical_replication_slot('decant_standby');  -- on the primary\nALTER SYSTEM SET primary_slot_name = 'decant_standby';  -- on the standby\nSELECT pg_reload_conf();",
			"postgres.dsn is a standby without primary_slot_name: hot_standby_feedback holds the primary's catalog rows only while the standby is connected, and the primary may recycle WAL the standby has not received")
	}
}

// CheckLive binds set to the catalog read from db, reads the server's
// settings (ReadCheckEnv) and returns every problem Bind and Check find,
// and the names of the aggregates that bound. publication, slot and
// createPublication are the postgres section of decant.yaml.
func CheckLive(ctx context.Context, db Querier, set *Set, publication, slot string, createPublication bool) ([]Problem, []string, error) {
	cat, err := ReadCatalog(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	var problems []Problem
	model, err := Bind(set, cat)
	if err != nil {
		problems = BindProblems(err)
	}
	if err := CheckSQL(ctx, db, model); err != nil {
		problems = append(problems, BindProblems(err)...)
	}
	env, err := ReadCheckEnv(ctx, db, publication, slot)
	if err != nil {
		return problems, nil, err
	}
	env.CreatePublication = createPublication
	return append(problems, Check(model, cat, env)...), model.AggregateNames(), nil
}

// ReadCheckEnv reads the role, server settings, publication, slot and
// table privileges that Check needs.
func ReadCheckEnv(ctx context.Context, db Querier, publication, slot string) (CheckEnv, error) {
	env := CheckEnv{Publication: publication, Slot: slot, CanSelect: map[TableName]bool{}}
	wrap := func(err error) (CheckEnv, error) {
		return env, fmt.Errorf("mappings: reading server settings: %w", err)
	}
	if err := row(ctx, db, `SELECT current_user::text, r.rolsuper, r.rolreplication, current_setting('wal_level'), current_database()::text
FROM pg_roles r WHERE r.rolname = current_user`, nil,
		&env.User, &env.Superuser, &env.Replication, &env.WALLevel, &env.Database); err != nil {
		return wrap(err)
	}
	if err := row(ctx, db, `SELECT current_setting('server_version_num')::int, pg_is_in_recovery(),
       current_setting('hot_standby_feedback'), coalesce(current_setting('primary_slot_name', true), '')`, nil,
		&env.ServerVersionNum, &env.Standby, &env.HotStandbyFeedback, &env.PrimarySlotName); err != nil {
		return wrap(err)
	}
	var ins, upd, del, trunc bool
	found, err := optionalRow(ctx, db, `SELECT pubinsert, pubupdate, pubdelete, pubtruncate FROM pg_publication WHERE pubname = $1`, []any{publication},
		&ins, &upd, &del, &trunc)
	if err != nil {
		return wrap(err)
	}
	if found {
		env.PublicationExists = true
		for a, on := range map[string]bool{"insert": ins, "update": upd, "delete": del, "truncate": trunc} {
			if on {
				env.PublicationActions = append(env.PublicationActions, a)
			}
		}
		sort.Strings(env.PublicationActions)
		if err := each(ctx, db, `SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1`, func(r pgx.Rows) error {
			var t TableName
			if err := r.Scan(&t.Schema, &t.Name); err != nil {
				return err
			}
			env.PublicationTables = append(env.PublicationTables, t)
			return nil
		}, publication); err != nil {
			return wrap(err)
		}
	}
	env.SlotExists, err = optionalRow(ctx, db, `SELECT plugin::text, coalesce(database::text, '') FROM pg_replication_slots WHERE slot_name = $1`, []any{slot},
		&env.SlotPlugin, &env.SlotDatabase)
	if err != nil {
		return wrap(err)
	}
	if err := each(ctx, db, `SELECT n.nspname::text, c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')`, func(r pgx.Rows) error {
		var t TableName
		if err := r.Scan(&t.Schema, &t.Name); err != nil {
			return err
		}
		env.CanSelect[t] = true
		return nil
	}); err != nil {
		return wrap(err)
	}
	return env, nil
}

// optionalRow is row for a query that may match no row: found is false then.
func optionalRow(ctx context.Context, db Querier, sql string, args []any, dest ...any) (found bool, err error) {
	err = row(ctx, db, sql, args, dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func row(ctx context.Context, db Querier, sql string, args []any, dest ...any) error {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	return rows.Err()
}
