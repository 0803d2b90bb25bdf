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

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/decant-cdc/decant/internal/testenv"
)

// BenchmarkStreamVsRecvlogical is the streamer benchmark (make
// bench-stream). It measures one fixed backlog per shape, whatever b.N.
// Slots are created at one WAL position, then a backlog is written (one
// large transaction of N rows, or N/10 transactions of 10 rows) and drained
// DECANT_BENCH_STREAM_ROUNDS times (default 5) by each of:
//   - pg_recvlogical to /dev/null with decant's plugin options (protocol 2,
//     streaming on): PostgreSQL's decoding alone, which sends a large
//     transaction before it commits;
//   - pg_recvlogical to /dev/null with pgoutput's defaults (protocol 1): the
//     committed transactions, which is what decant must deliver;
//   - a minimal Go reader ("go"): the streamer's own replication connection
//     code (connection settings, read coalescing) and plugin options,
//     discarding every message — what any Go client of this connection
//     costs; the ceiling is the faster of it and pg_recvlogical (streaming on);
//   - the streamer into Kafka.
//
// The order rotates each round and each figure is the median of its rounds,
// so a burst of other work or a drift of the machine hits all three. One
// more streamer drain runs first, untimed, so no timed one reads the
// backlog cold or meets a cold broker. Autovacuum is off for the table and a checkpoint precedes
// the drains, so neither lands inside one of them.
func BenchmarkStreamVsRecvlogical(b *testing.B) {
	rows, rounds := 1000000, 5
	if v := os.Getenv("DECANT_BENCH_ROWS"); v != "" {
		fmt.Sscan(v, &rows)
	}
	if v := os.Getenv("DECANT_BENCH_STREAM_ROUNDS"); v != "" {
		fmt.Sscan(v, &rounds)
	}
	for _, shape := range []string{"one large transaction", "small transactions"} {
		b.Run(strings.ReplaceAll(shape, " ", "_"), func(t *testing.B) {
			e := newEnv(t, `CREATE TABLE orders (id bigint PRIMARY KEY, customer_id int, total numeric(12,2), status text, placed_at timestamptz) WITH (autovacuum_enabled = off);
				CREATE PUBLICATION decant FOR TABLE orders;`)
			e.cfg.SnapshotMode = "never"
			e.cfg.Partitions = 6
			ctx := context.Background()
			// Warm up: the streamer creates its topics on a first row, so
			// the measured runs below pay no set-up cost.
			e.start()
			e.pg.Exec(t, `INSERT INTO orders VALUES (0, 0, 0, 'warm-up', now())`)
			e.waitCaughtUp(2 * time.Minute)
			e.stop()
			e.dropSlot(e.cfg.Slot)
			// Slot names are server-wide: they start with this test's slot.
			base := e.cfg.Slot
			slot := func(kind string, round int) string { return fmt.Sprintf("%s_%s%d", base, kind, round) }
			kinds := []string{"on", "off", "go", "decant"}
			e.pg.Exec(t, "SELECT pg_create_logical_replication_slot('"+slot("warm", 0)+"', 'pgoutput')")
			for i := 0; i < rounds; i++ {
				for _, k := range kinds {
					e.pg.Exec(t, "SELECT pg_create_logical_replication_slot('"+slot(k, i)+"', 'pgoutput')")
				}
			}
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
			e.pg.Exec(t, "CHECKPOINT")

			recvlogical := func(slot string, opts ...string) time.Duration {
				started := time.Now()
				args := []string{"-d", e.pg.DSN, "--slot", slot, "--start", "-o", "publication_names=decant", "-E", end, "-f", "/dev/null"}
				for _, o := range opts {
					args = append(args, "-o", o)
				}
				if out, err := exec.Command("pg_recvlogical", args...).CombinedOutput(); err != nil {
					t.Fatalf("pg_recvlogical: %v: %s", err, out)
				}
				return time.Since(started)
			}
			// The untimed first drain is the streamer's: it reads the backlog
			// into memory for everyone, and warms the broker's and the
			// streamer's code paths up, which made the first timed decant
			// drain the slowest of three.
			e.cfg.Slot = slot("warm", 0)
			e.start()
			e.waitCaughtUpTo(end, 10*time.Minute)
			e.stop()
			e.dropSlot(slot("warm", 0))
			took := map[string][]time.Duration{}
			var cpu float64
			for i := 0; i < rounds; i++ {
				for j := range kinds {
					k := kinds[(i+j)%len(kinds)]
					var d time.Duration
					switch k {
					case "on": // decant's options on PostgreSQL 14+
						d = recvlogical(slot(k, i), "proto_version=2", "streaming=on")
					case "off": // pgoutput's defaults
						d = recvlogical(slot(k, i), "proto_version=1")
					case "go":
						d = goReader(t, e.pg.DSN, slot(k, i), end)
					case "decant":
						e.cfg.Slot = slot(k, i)
						started, cpu0 := time.Now(), cpuSeconds()
						e.start()
						e.waitCaughtUpTo(end, 10*time.Minute)
						d = time.Since(started)
						cpu += cpuSeconds() - cpu0
						e.stop()
					}
					e.dropSlot(slot(k, i))
					took[k] = append(took[k], d)
				}
			}
			rate := func(k string) float64 { return float64(rows) / testenv.Median(took[k]).Seconds() }
			recv, off, goRead, ours := rate("on"), rate("off"), rate("go"), rate("decant")
			on := max(recv, goRead) // the ceiling: the faster reader that discards
			cpuPer1k := cpu * 1000 / float64(rows*rounds)
			t.ReportMetric(ours/on, "ratio")
			t.ReportMetric(ours/off, "ratio-committed")
			t.ReportMetric(ours, "rows/s")
			t.ReportMetric(cpuPer1k, "cpu-s/1k-rows")
			fmt.Printf("BENCH stream %-22s rows=%d rounds=%d pg_recvlogical=%.0f rows/s (streaming on) go_reader=%.0f rows/s (streaming on) pg_recvlogical_committed=%.0f rows/s (protocol 1) ceiling=%.0f rows/s (the faster reader) decant=%.0f rows/s ratio=%.2f ratio_committed=%.2f cpu=%.3fs/1k rows peak_rss=%dMB %s\n",
				shape, rows, rounds, recv, goRead, off, on, ours, ours/on, ours/off, cpuPer1k, peakRSS(t, os.Getpid())>>20, runs(took, kinds))
		})
	}
}

// dropSlot drops a slot once the walsender that used it has exited.
func (e *env) dropSlot(name string) {
	e.t.Helper()
	var err error
	for range 100 {
		if _, err = e.pg.Pool.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", name); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("drop slot %s: %v", name, err)
}

// runs lists every timed drain, for the log.
func runs(took map[string][]time.Duration, kinds []string) string {
	var parts []string
	for _, k := range kinds {
		var ss []string
		for _, d := range took[k] {
			ss = append(ss, fmt.Sprintf("%.2fs", d.Seconds()))
		}
		parts = append(parts, "runs_"+k+"="+strings.Join(ss, ","))
	}
	return strings.Join(parts, " ")
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

// goReader drains slot up to end as the streamer's replication connection
// does — withParams (its session settings and read coalescing), protocol
// 2 with streaming on, status updates every 200 ms — and discards every
// message. It stops, as pg_recvlogical -E does, at the first message
// whose position reaches end, and returns how long the drain took.
func goReader(t testing.TB, dsn, slot, end string) time.Duration {
	t.Helper()
	ctx := context.Background()
	endLSN, err := pglogrepl.ParseLSN(end)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := withParams(dsn, true)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	args := []string{"proto_version '2'", "publication_names 'decant'", "messages 'false'", "streaming 'on'"}
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		t.Fatal(err)
	}
	var pos pglogrepl.LSN
	nextStatus := time.Now().Add(200 * time.Millisecond)
	for pos < endLSN {
		if time.Now().After(nextStatus) {
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: pos}); err != nil {
				t.Fatal(err)
			}
			nextStatus = time.Now().Add(200 * time.Millisecond)
		}
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("go reader: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				t.Fatal(err)
			}
			pos = max(pos, x.WALStart)
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				t.Fatal(err)
			}
			pos = max(pos, k.ServerWALEnd)
			if k.ReplyRequested {
				nextStatus = time.Time{}
			}
		}
	}
	return time.Since(started)
}
