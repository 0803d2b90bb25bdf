package streamer

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Failover slots (PostgreSQL 17+). A logical slot created with failover =
// true is copied to every standby that has sync_replication_slots = on;
// when such a standby is promoted, its copy (pg_replication_slots.synced)
// becomes usable and decant continues from it: the session that lost the
// old primary reconnects through a multi-host postgres.dsn, finds the slot
// and its "done" snapshot marker, and resumes at the copy's confirmed LSN.
// The copy lags the primary's slot by up to the sync interval, so changes
// after it are streamed again (duplicates, in order), never skipped: the
// primary's slot is confirmed only past acknowledged changes and the copy
// is never ahead of it. With synchronized_standby_slots naming the
// standby's physical slot, the old primary sent decant nothing the standby
// had not received, so nothing in the raw topics is missing on the new
// primary either (docs/operations.md, "Failover").

// serverInfo is what the slot decisions need to know of the server.
type serverInfo struct {
	versionNum int  // server_version_num
	inRecovery bool // a hot standby
}

func readServer(ctx context.Context, pool *pgxpool.Pool) (serverInfo, error) {
	var si serverInfo
	err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, pg_is_in_recovery()`).Scan(&si.versionNum, &si.inRecovery)
	if err != nil {
		return si, fmt.Errorf("read server version: %w", err)
	}
	return si, nil
}

// wantFailover decides whether the slot is a failover slot on srv:
// Config.SlotFailover auto means when srv can (a 17+ primary; a standby
// cannot create one), true requires it.
func (s *Streamer) wantFailover(srv serverInfo) (bool, error) {
	can := srv.versionNum >= 170000 && !srv.inRecovery
	switch s.cfg.SlotFailover {
	case "false":
		return false, nil
	case "true":
		if !can {
			what := fmt.Sprintf("PostgreSQL %d.%d", srv.versionNum/10000, srv.versionNum%10000)
			if srv.inRecovery {
				what = "a standby (failover slots are created on the primary)"
			}
			return false, permanent(fmt.Errorf("streamer.slot_failover is true but postgres.dsn is %s: failover slots need a PostgreSQL 17+ primary; set slot_failover: auto or false", what))
		}
		return true, nil
	}
	return can, nil
}

// createSlotSQL is the CREATE_REPLICATION_SLOT command of a pgoutput slot.
// action is EXPORT_SNAPSHOT or NOEXPORT_SNAPSHOT; a failover slot uses the
// options list of PostgreSQL 15+ (FAILOVER is 17+), otherwise the older
// syntax every supported version accepts.
func createSlotSQL(slot, action string, failover bool) string {
	name := pgx.Identifier{slot}.Sanitize()
	if !failover {
		return "CREATE_REPLICATION_SLOT " + name + " LOGICAL pgoutput " + action
	}
	snapshot := "'export'"
	if action == "NOEXPORT_SNAPSHOT" {
		snapshot = "'nothing'"
	}
	return "CREATE_REPLICATION_SLOT " + name + " LOGICAL pgoutput (SNAPSHOT " + snapshot + ", FAILOVER true)"
}

func createSlot(ctx context.Context, repl *pgconn.PgConn, slot, action string, failover bool) (pglogrepl.CreateReplicationSlotResult, error) {
	return pglogrepl.ParseCreateReplicationSlot(repl.Exec(ctx, createSlotSQL(slot, action, failover)))
}

// alterSlotFailover turns an existing slot into a failover slot (17+).
func alterSlotFailover(ctx context.Context, repl *pgconn.PgConn, slot string) error {
	_, err := repl.Exec(ctx, "ALTER_REPLICATION_SLOT "+pgx.Identifier{slot}.Sanitize()+" (FAILOVER true)").ReadAll()
	if err != nil {
		if isInUse(err) {
			return errSlotBusy
		}
		return fmt.Errorf("set failover = true on slot %s: %w (streamer.slot_failover: false keeps the slot as it is)", slot, err)
	}
	return nil
}
