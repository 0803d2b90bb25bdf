package streamer

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkStreamVsRecvlogical is the streamer benchmark (make
// bench-stream). It measures one fixed backlog per shape, whatever b.N.
// Three slots are created at the same point and a WAL backlog is written
// (one large transaction of N rows, or N/10 transactions of 10 rows). Then
// pg_recvlogical drains one slot untimed (so no timed run reads the backlog
// cold), pg_recvlogical drains the second to /dev/null (the decode ceiling,
// timed), and the streamer drains the third into Kafka (timed). It prints
// rows/s of each and the ratio.
func BenchmarkStreamVsRecvlogical(b *testing.B) {
	rows := 1000000
	if v := os.Getenv("DECANT_BENCH_ROWS"); v != "" {
		fmt.Sscan(v, &rows)
	}
	for _, shape := range []string{"one large transaction", "small transactions"} {
		b.Run(strings.ReplaceAll(shape, " ", "_"), func(t *testing.B) {
			e := newEnv(t, `CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, total numeric(12,2), status text, placed_at timestamptz);
				CREATE PUBLICATION decant FOR TABLE orders;`)
			e.cfg.SnapshotMode = "never"
			e.cfg.Partitions = 6
			ctx := context.Background()
			// Warm up: the streamer creates its slot and topics on a first
			// row, so the measured run below pays no set-up cost; then
			// pg_recvlogical's slot starts where the streamer stands.
			e.start()
			e.pg.Exec(t, `INSERT INTO orders VALUES (0, 0, 0, 'warm-up', now())`)
			e.waitCaughtUp(2 * time.Minute)
			e.stop()
			// Slot names are server-wide. A third slot is drained first,
			// untimed, so neither timed run reads the backlog cold: the one
			// that came first used to pay for it.
			recvSlot, warmSlot := e.cfg.Slot+"_recv", e.cfg.Slot+"_warm"
			e.pg.Exec(t, "SELECT pg_create_logical_replication_slot('"+recvSlot+"', 'pgoutput')")
			e.pg.Exec(t, "SELECT pg_create_logical_replication_slot('"+warmSlot+"', 'pgoutput')")
			if shape == "one large transaction" {
				e.pg.Exec(t, fmt.Sprintf(`INSERT INTO orders SELECT g, g %% 1000, g * 0.37, 'placed', '2026-11-30 10:00:00+00'::timestamptz + g * interval '1 second' FROM generate_series(1, %d) g`, rows))
			} else {
				e.pg.Exec(t, `CREATE PROCEDURE fill(n int) LANGUAGE plpgsql AS $$
					BEGIN FOR i IN 0..n/10-1 LOOP
						INSERT INTO orders SELECT g, g % 1000, g * 0.37, 'placed', '2026-11-30 10:00:00+00'::timestamptz + g * interval '1 second' FROM generate_series(i*10+1, i*10+10) g;
						COMMIT;
					END LOOP; END $$`)
				e.pg.Exec(t, fmt.Sprintf("CALL fill(%d)", rows))
			}
			var end string
			if err := e.pg.Pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
				t.Fatal(err)
			}

			drain := func(slot string) time.Duration {
				started := time.Now()
				cmd := exec.Command("pg_recvlogical", "-d", e.pg.DSN, "--slot", slot, "--start",
					// The plugin options decant uses on PostgreSQL 14+.
					"-o", "proto_version=2", "-o", "streaming=on", "-o", "publication_names=decant", "-E", end, "-f", "/dev/null")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("pg_recvlogical: %v: %s", err, out)
				}
				return time.Since(started)
			}
			drain(warmSlot)
			e.pg.Exec(t, "SELECT pg_drop_replication_slot('"+warmSlot+"')")
			recv := drain(recvSlot)

			started := time.Now()
			cpu0 := cpuSeconds()
			e.start()
			e.waitCaughtUpTo(end, 10*time.Minute)
			ours := time.Since(started)
			cpu := cpuSeconds() - cpu0
			e.stop()
			rr, or := float64(rows)/recv.Seconds(), float64(rows)/ours.Seconds()
			t.ReportMetric(or/rr, "ratio")
			t.ReportMetric(or, "rows/s")
			t.ReportMetric(cpu*1000/float64(rows), "cpu-s/1k-rows")
			fmt.Printf("BENCH stream %-22s rows=%d pg_recvlogical=%.0f rows/s (%.2fs) decant=%.0f rows/s (%.2fs) ratio=%.2f cpu=%.3fs/1k rows peak_rss=%dMB\n",
				shape, rows, rr, recv.Seconds(), or, ours.Seconds(), or/rr, cpu*1000/float64(rows), vmHWM(t, os.Getpid())>>20)
		})
	}
}

// waitCaughtUpTo waits until the slot has confirmed the LSN target.
func (e *env) waitCaughtUpTo(target string, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var ok bool
		err := e.pg.Pool.QueryRow(context.Background(),
			"SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false) FROM pg_replication_slots WHERE slot_name = $1", e.cfg.Slot, target).Scan(&ok)
		if err == nil && ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("slot %s did not confirm %s within %s", e.cfg.Slot, target, timeout)
}

// cpuSeconds is the user+system CPU time of this process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
