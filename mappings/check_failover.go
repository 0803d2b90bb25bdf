package mappings

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// FailoverEnv is what CheckFailover needs to know of failover slots
// (PostgreSQL 17+): the setting, postgres.dsn's hosts, and the settings of
// the server decant reached and of the other hosts.
type FailoverEnv struct {
	// SlotFailover is streamer.slot_failover: auto, true or false.
	SlotFailover string
	// Hosts is how many hosts postgres.dsn lists; TargetSessionAttrs its
	// target_session_attrs ("" when not set).
	Hosts              int
	TargetSessionAttrs string
	// Server is the server postgres.dsn reached.
	Server ServerSettings
	// Others are postgres.dsn's other hosts, each connected to directly.
	Others []ServerSettings
}

// ServerSettings are one server's replication settings (ReadServerSettings).
type ServerSettings struct {
	Addr string // host:port, for messages
	// Instance tells servers apart (postmaster start time and port): a
	// host of postgres.dsn may be the server already read under another name.
	Instance string
	// Err is why the server could not be read ("" when it was).
	Err        string
	VersionNum int
	Standby    bool // pg_is_in_recovery()
	// On a primary: synchronized_standby_slots (17+) and its physical slots.
	SynchronizedStandbySlots string
	PhysicalSlots            []string
	// On a standby.
	SyncReplicationSlots, HotStandbyFeedback, PrimarySlotName string
	// ConninfoReadable: primary_conninfo could be read (superusers and
	// pg_read_all_settings); ConninfoDBName: it names a dbname. The
	// conninfo itself is never kept: it may hold a password.
	ConninfoReadable, ConninfoDBName bool
}

// serverSettingsSQL reads ServerSettings; the to_jsonb and missing_ok
// forms read settings that older versions lack as "".
const serverSettingsSQL = `SELECT pg_postmaster_start_time()::text || '@' || coalesce(inet_server_port()::text, 'socket'),
       current_setting('server_version_num')::int, pg_is_in_recovery(),
       coalesce(current_setting('synchronized_standby_slots', true), ''),
       array(SELECT slot_name::text FROM pg_replication_slots WHERE slot_type = 'physical' ORDER BY 1),
       coalesce(current_setting('sync_replication_slots', true), ''), current_setting('hot_standby_feedback'),
       coalesce(current_setting('primary_slot_name', true), ''),
       (SELECT setting FROM pg_settings WHERE name = 'primary_conninfo')`

// ReadServerSettings reads the replication settings of the server db is on.
func ReadServerSettings(ctx context.Context, db Querier, addr string) (ServerSettings, error) {
	s := ServerSettings{Addr: addr}
	var conninfo *string
	if err := row(ctx, db, serverSettingsSQL, nil, &s.Instance, &s.VersionNum, &s.Standby, &s.SynchronizedStandbySlots, &s.PhysicalSlots,
		&s.SyncReplicationSlots, &s.HotStandbyFeedback, &s.PrimarySlotName, &conninfo); err != nil {
		return s, fmt.Errorf("mappings: reading the replication settings of %s: %w", addr, err)
	}
	if conninfo != nil {
		s.ConninfoReadable = true
		s.ConninfoDBName = conninfoHasDBName(*conninfo)
	}
	return s, nil
}

var dbnameKey = regexp.MustCompile(`(^|\s)dbname\s*=\s*('[^']|[^\s'])|^postgres(ql)?://[^/]*/[^?/\s]`)

// conninfoHasDBName reports whether a libpq conninfo (key=value words or
// a URI) names a database.
func conninfoHasDBName(conninfo string) bool {
	return dbnameKey.MatchString(strings.TrimSpace(conninfo))
}

// CheckFailover returns the problems of failover slots: a setting the
// server cannot honour, and the primary's and standbys' settings without
// which a promoted standby has no usable copy of the slot, or has one
// behind changes decant already published. Nothing when
// streamer.slot_failover is false.
func CheckFailover(env FailoverEnv) []Problem {
	if env.SlotFailover == "false" {
		return nil
	}
	var out []Problem
	add := func(sev Severity, fix, format string, a ...any) {
		out = append(out, Problem{Severity: sev, Message: fmt.Sprintf(format, a...), Fix: fix})
	}
	srv := env.Server
	switch {
	case srv.Standby:
		if env.SlotFailover == "true" {
			add(SeverityError, "point postgres.dsn at the primary (target_session_attrs=primary), or set streamer.slot_failover: auto",
				"streamer.slot_failover is true but postgres.dsn reached a standby (%s): failover slots are created on the primary", srv.Addr)
		}
		return out
	case srv.VersionNum < 170000:
		if env.SlotFailover == "true" {
			add(SeverityError, "upgrade to PostgreSQL 17+, or set streamer.slot_failover: auto",
				"streamer.slot_failover is true but %s is PostgreSQL %s: failover slots need 17+", srv.Addr, version(srv.VersionNum))
		} else if env.Hosts > 1 {
			add(SeverityWarning, "upgrade to PostgreSQL 17+ for failover slots",
				"postgres.dsn lists %d hosts but PostgreSQL %s has no failover slots: a promoted standby has no copy of the slot, and decant creates a new one and snapshots again", env.Hosts, version(srv.VersionNum))
		}
		return out
	}
	if env.Hosts > 1 && env.TargetSessionAttrs != "primary" && env.TargetSessionAttrs != "read-write" {
		add(SeverityWarning, "add target_session_attrs=primary to postgres.dsn",
			"postgres.dsn lists %d hosts without target_session_attrs=primary: when the first is down decant may connect to a standby, where the slot is a copy it cannot use until that standby is promoted", env.Hosts)
	}
	listed := splitSlotList(srv.SynchronizedStandbySlots)
	for _, name := range listed {
		if !slices.Contains(srv.PhysicalSlots, name) {
			add(SeverityError, fmt.Sprintf("SELECT pg_create_physical_replication_slot('%s');  -- on the primary, for the standby\n-- or remove it: ALTER SYSTEM SET synchronized_standby_slots = '…'; SELECT pg_reload_conf();", name),
				"synchronized_standby_slots on the primary %s names %q, which is not a physical slot there: PostgreSQL holds every failover slot's changes back waiting for it, and decant's stream stops", srv.Addr, name)
		}
	}
	var standbys []ServerSettings
	for _, o := range env.Others {
		if o.Err != "" {
			add(SeverityWarning, "check that "+o.Addr+" is up and accepts decant's user", "could not check host %s of postgres.dsn: %s", o.Addr, o.Err)
			continue
		}
		if !o.Standby {
			add(SeverityWarning, "list the primary and its standbys only in postgres.dsn",
				"host %s of postgres.dsn is not a standby but a second primary: decant follows target_session_attrs to whichever answers first", o.Addr)
			continue
		}
		standbys = append(standbys, o)
	}
	if len(listed) == 0 && (len(standbys) > 0 || len(srv.PhysicalSlots) > 0) {
		slot := "<the standby's physical slot>"
		if len(standbys) > 0 && standbys[0].PrimarySlotName != "" {
			slot = standbys[0].PrimarySlotName
		} else if len(srv.PhysicalSlots) > 0 {
			slot = srv.PhysicalSlots[0]
		}
		add(SeverityWarning, fmt.Sprintf("ALTER SYSTEM SET synchronized_standby_slots = '%s';  -- on the primary\nSELECT pg_reload_conf();", slot),
			"synchronized_standby_slots is empty on the primary %s: it may send decant changes its standby has not received, which a promoted standby does not have (they stay in the raw topics), and the standby's copy of the slot may be unusable", srv.Addr)
	}
	for _, sb := range standbys {
		at := "  -- on the standby " + sb.Addr
		if sb.VersionNum < 170000 {
			add(SeverityWarning, "upgrade the standby to PostgreSQL 17+", "the standby %s is PostgreSQL %s: it cannot keep a copy of the failover slot", sb.Addr, version(sb.VersionNum))
			continue
		}
		if sb.SyncReplicationSlots != "on" {
			add(SeverityWarning, "ALTER SYSTEM SET sync_replication_slots = on;"+at+"\nSELECT pg_reload_conf();",
				"the standby %s has sync_replication_slots = %s: it keeps no copy of decant's slot, and after its promotion decant creates a new slot and snapshots again", sb.Addr, sb.SyncReplicationSlots)
		}
		if sb.HotStandbyFeedback != "on" {
			add(SeverityWarning, "ALTER SYSTEM SET hot_standby_feedback = on;"+at+"\nSELECT pg_reload_conf();",
				"the standby %s has hot_standby_feedback = %s: the slot sync worker needs it to keep the slot's catalog rows", sb.Addr, sb.HotStandbyFeedback)
		}
		if sb.PrimarySlotName == "" {
			add(SeverityWarning, "SELECT pg_create_physical_replication_slot('decant_standby');  -- on the primary\nALTER SYSTEM SET primary_slot_name = 'decant_standby';"+at+"\nSELECT pg_reload_conf();",
				"the standby %s has no primary_slot_name: the slot sync worker needs a physical slot on the primary", sb.Addr)
		} else if len(listed) > 0 && !slices.Contains(listed, sb.PrimarySlotName) {
			add(SeverityWarning, fmt.Sprintf("ALTER SYSTEM SET synchronized_standby_slots = '%s';  -- on the primary\nSELECT pg_reload_conf();", strings.Join(append(listed, sb.PrimarySlotName), ",")),
				"synchronized_standby_slots on the primary does not name the standby %s's slot %q: the primary may send decant changes that standby has not received", sb.Addr, sb.PrimarySlotName)
		}
		switch {
		case !sb.ConninfoReadable:
			add(SeverityWarning, "GRANT pg_read_all_settings TO <decant's user>;", "cannot read primary_conninfo on the standby %s (it needs pg_read_all_settings) to check that it names a dbname", sb.Addr)
		case !sb.ConninfoDBName:
			add(SeverityWarning, "add dbname=<a database> to primary_conninfo"+at+", then SELECT pg_reload_conf();",
				"primary_conninfo on the standby %s names no dbname: the slot sync worker cannot connect to the primary", sb.Addr)
		}
	}
	return out
}

// splitSlotList splits a comma-separated list of slot names.
func splitSlotList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.Trim(strings.TrimSpace(f), `"`); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// version is server_version_num as major.minor (10+: 170006 is 17.6).
func version(num int) string { return fmt.Sprintf("%d.%d", num/10000, num%10000) }
