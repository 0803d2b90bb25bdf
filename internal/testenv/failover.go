package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// FailoverPair is the primary and standby of `e2e/infra/pg.sh failover-up`
// (PostgreSQL 17+): the standby synchronizes the primary's failover slots
// (sync_replication_slots = on) and the primary waits for the standby's
// physical slot before it sends logical changes (synchronized_standby_slots).
type FailoverPair struct {
	Primary, Standby string // maintenance DSNs of each server
	// Admin is the maintenance DSN listing both servers with
	// target_session_attrs=primary: it reaches the primary before the
	// failover and the promoted standby after (PostgresOn, PipelineSpec.PGAdmin).
	Admin string
}

// FailoverVersion skips a test of failover slots when this run's
// PostgreSQL (DECANT_PG_VERSION) is older than 17, which has none: a
// version this run does not cover, not a missing server (make test runs
// the failover test once more on 18 in its drift step; make test-pg on 17
// and 18).
func FailoverVersion(t testing.TB) {
	t.Helper()
	if PGVersion() < 17 {
		t.Skipf("failover slots need PostgreSQL 17+; this run uses PostgreSQL %d (make test runs it on 18, make test-pg on 17 and 18)", PGVersion())
	}
}

// Failover starts a fresh failover pair (a failover consumes it) with
// `pg.sh failover-up` and stops it at cleanup. It skips below PostgreSQL
// 17 (FailoverVersion) and fails (CI) or skips when the pair cannot be
// started. Call it before PostgresOn, so that the pair outlives the
// database's cleanup.
func Failover(t testing.TB) *FailoverPair {
	t.Helper()
	Integration(t)
	FailoverVersion(t)
	v := strconv.Itoa(PGVersion())
	primary, standby := env("DECANT_PG_FAILOVER_PORT", "556"+v), env("DECANT_PG_FAILOVER_STANDBY_PORT", "557"+v)
	script := filepath.Join(RepoRoot(), "e2e", "infra", "pg.sh")
	run := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
		cmd.Env = append(os.Environ(), "DECANT_PG_FAILOVER_PORT="+primary, "DECANT_PG_FAILOVER_STANDBY_PORT="+standby)
		return cmd.CombinedOutput()
	}
	started := time.Now()
	if out, err := run("failover-up"); err != nil {
		unavailable(t, "PostgreSQL "+v+" failover pair (e2e/infra/pg.sh failover-up)", fmt.Errorf("%v\n%s", err, out))
	}
	t.Cleanup(func() {
		if out, err := run("failover-down", "--clean"); err != nil {
			t.Logf("pg.sh failover-down: %v\n%s", err, out)
		}
	})
	t.Logf("failover pair of PostgreSQL %s: primary 127.0.0.1:%s, standby 127.0.0.1:%s (%s)", v, primary, standby, time.Since(started).Round(time.Millisecond))
	dsn := func(hosts, params string) string {
		return "postgres://postgres@" + hosts + "/postgres?sslmode=disable" + params
	}
	return &FailoverPair{
		Primary: dsn("127.0.0.1:"+primary, ""),
		Standby: dsn("127.0.0.1:"+standby, ""),
		Admin:   dsn("127.0.0.1:"+primary+",127.0.0.1:"+standby, "&target_session_attrs=primary"),
	}
}

// WaitSlotSynced waits until the standby holds a persistent, synchronized
// copy of slot whose confirmed_flush_lsn has reached the primary slot's
// confirmed_flush_lsn as it is when WaitSlotSynced is called.
func (f *FailoverPair) WaitSlotSynced(t testing.TB, slot string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	var target string
	if err := queryOnce(ctx, f.Primary, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1 AND failover`, []any{slot}, &target); err != nil {
		t.Fatalf("failover slot %s on the primary: %v", slot, err)
	}
	c, err := pgx.Connect(ctx, f.Standby)
	if err != nil {
		t.Fatalf("standby: %v", err)
	}
	defer c.Close(ctx)
	WaitFor(t, "the standby's synchronized copy of slot "+slot+" to reach "+target, timeout, func() (bool, error) {
		var ok bool
		err := c.QueryRow(ctx, `SELECT synced AND NOT temporary AND invalidation_reason IS NULL AND confirmed_flush_lsn >= $2::pg_lsn
FROM pg_replication_slots WHERE slot_name = $1`, slot, target).Scan(&ok)
		return ok, err
	})
}

// KillPrimary kills the primary's postmaster and every one of its
// processes with SIGKILL (a crash: nothing is flushed or sent after it).
// It returns the primary's last written LSN read just before.
func (f *FailoverPair) KillPrimary(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, f.Primary)
	if err != nil {
		t.Fatalf("primary: %v", err)
	}
	var pidFile, lsn string
	var pids []int
	err = c.QueryRow(ctx, `SELECT pg_read_file('postmaster.pid'), pg_current_wal_lsn()::text,
       array(SELECT pid FROM pg_stat_activity WHERE pid <> pg_backend_pid())`).Scan(&pidFile, &lsn, &pids)
	c.Close(ctx)
	if err != nil {
		t.Fatalf("primary's processes: %v", err)
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(pidFile, "\n", 2)[0]))
	if err != nil {
		t.Fatalf("postmaster.pid: %q: %v", pidFile, err)
	}
	for _, pid := range append([]int{postmaster}, pids...) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return lsn
}

// Promote promotes the standby (pg_promote(), what pg_ctl promote does)
// and waits until it accepts writes.
func (f *FailoverPair) Promote(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var ok bool
	if err := queryOnce(ctx, f.Standby, `SELECT pg_promote(true, 60)`, nil, &ok); err != nil || !ok {
		t.Fatalf("promote the standby: %v (promoted: %v)", err, ok)
	}
}

// queryOnce runs one query on a new connection to dsn and scans its row.
func queryOnce(ctx context.Context, dsn, sql string, args []any, dest ...any) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.QueryRow(ctx, sql, args...).Scan(dest...)
}
