package peers

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/decant-cdc/decant/internal/testenv"
)

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestMain removes the decant binary built for this run.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveDecant()
	os.Exit(code)
}

// install runs `bash e2e/peers/SCRIPT install` (idempotent: a no-op once
// the peer is installed).
func install(tb testing.TB, script string) {
	tb.Helper()
	cmd := exec.Command("bash", filepath.Join(testenv.RepoRoot(), "e2e", "peers", script), "install")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("%s install: %v\n%s", script, err, out)
	}
}

// placeholder is an @KEY@ in a template file.
var placeholder = regexp.MustCompile(`@[A-Z_]+@`)

// template reads a file under e2e/peers and replaces each @KEY@ by its
// value; one left outside a # comment fails the benchmark.
func template(tb testing.TB, name string, vars map[string]string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "e2e", "peers", name))
	if err != nil {
		tb.Fatal(err)
	}
	s := string(b)
	for k, v := range vars {
		s = strings.ReplaceAll(s, "@"+k+"@", v)
	}
	for line := range strings.SplitSeq(s, "\n") {
		if m := placeholder.FindString(line); m != "" && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			tb.Fatalf("%s: no value for placeholder %s", name, m)
		}
	}
	return s
}

// proc is a child process whose CPU time and memory are measured from /proc.
type proc struct {
	*testenv.Proc
	started time.Time
}

// startProc runs cmd in dir, output to dir/NAME.log. The process is killed
// if the benchmark process dies, and stopped at cleanup.
func startProc(tb testing.TB, dir, name string, cmd *exec.Cmd) *proc {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := time.Now()
	p := &proc{Proc: testenv.Start(tb, name, filepath.Join(dir, name+".log"), cmd), started: started}
	tb.Cleanup(p.stop)
	return p
}

// command is argv with env added to this process's environment (decant
// itself is started with testenv.DecantCmd: it refuses unknown DECANT_
// variables, which the peers' scripts read).
func command(env []string, argv ...string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// stop sends SIGCONT (in case it is paused) and SIGTERM, and waits up to
// 30s before SIGKILL. Idempotent.
func (p *proc) stop() {
	p.Signal(syscall.SIGCONT)
	p.Term(30 * time.Second)
}

func (p *proc) pause()  { p.Signal(syscall.SIGSTOP) }
func (p *proc) resume() { p.Signal(syscall.SIGCONT) }

// tree is the process and its descendants.
func (p *proc) tree() []int {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(pid); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	out := []int{p.Pid()}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// statFields are the fields of /proc/PID/stat after the command name:
// [0] state, [1] ppid, … [11] utime, [12] stime (clock ticks).
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(b[i+1:]))
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// cpu is the user+system CPU seconds used so far by the process and its
// descendants.
func (p *proc) cpu() float64 {
	var ticks int64
	for _, pid := range p.tree() {
		if f := statFields(pid); len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
		}
	}
	return float64(ticks) / clockTicks
}

// peakRSS is the peak resident set (VmHWM) of the process plus that of each
// live descendant, in bytes.
func (p *proc) peakRSS() int64 {
	var total int64
	for _, pid := range p.tree() {
		if n, err := testenv.PeakRSS(pid); err == nil {
			total += n
		}
	}
	return total
}

// waitUntil polls cond every interval until it returns true, and fails
// naming what it waited for after timeout or, with the process's log,
// when the process exits.
func waitUntil(tb testing.TB, p *proc, what string, timeout, interval time.Duration, cond func() (bool, error)) {
	tb.Helper()
	testenv.WaitEvery(tb, what, timeout, interval, func() (bool, error) {
		ok, err := cond()
		if !ok && p != nil && p.Exited() {
			tb.Fatalf("%s exited while waiting for %s (last error: %v)\n%s", p.Name, what, err, p.Tail(40))
		}
		return ok, err
	})
}

// topicRecords is the number of records written to topic so far (the sum
// of its partitions' end offsets; 0 while it does not exist).
func topicRecords(ctx context.Context, adm *kadm.Client, topic string) (int64, error) {
	offs, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	var n int64
	var perr error
	offs.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			perr = o.Err
			return
		}
		n += o.Offset
	})
	return n, perr
}

// latencies summarises commit → visible delays.
type latencies []time.Duration

func (l latencies) percentile(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.5) - 1
	return s[max(0, min(len(s)-1, i))]
}

// freshness times changes from their commit to the moment the tool under
// test makes them visible: a poller run by the caller calls seen, and
// measure writes the changes.
type freshness struct {
	mu        sync.Mutex
	committed []time.Time
	seenAt    []time.Time
	left      int           // changes not seen yet
	all       chan struct{} // closed when every change was seen
}

func newFreshness(n int) *freshness {
	return &freshness{committed: make([]time.Time, n), seenAt: make([]time.Time, n), left: n, all: make(chan struct{})}
}

// seen records that change i became visible at now (the first time
// counts). f.mu must be held.
func (f *freshness) seen(i int, now time.Time) {
	if f.seenAt[i].IsZero() {
		f.seenAt[i] = now
		if f.left--; f.left == 0 {
			close(f.all)
		}
	}
}

// measure writes the changes at rate per second with write, each in its
// own transaction through the workload's writer pool (committed, when not
// nil, runs under f.mu right after change i commits), waits up to timeout
// until every change was seen, and returns the delays and the CPU seconds
// used meanwhile by p and by the database. what completes "N of M changes
// never …" in the failure.
func (f *freshness) measure(ctx context.Context, b *testing.B, pg *testenv.PG, p *proc, rate int, timeout time.Duration, what string,
	write func(w *pgxpool.Pool, i int) error, committed func(i int)) (latencies, float64, float64) {
	b.Helper()
	w := writer(b, pg)
	cpu0, db0 := p.cpu(), dbCPU(b, pg)
	schedule(ctx, b, len(f.committed), rate, func(i int) error {
		err := write(w, i)
		f.mu.Lock()
		f.committed[i] = time.Now()
		if committed != nil {
			committed(i)
		}
		f.mu.Unlock()
		return err
	})
	select {
	case <-f.all:
	case <-time.After(timeout):
		f.mu.Lock()
		missing := f.left
		f.mu.Unlock()
		b.Fatalf("%d of %d changes never %s\n%s", missing, len(f.committed), what, p.Tail(40))
	}
	cpu, db := p.cpu()-cpu0, dbCPUSince(b, pg, db0)
	f.mu.Lock()
	defer f.mu.Unlock()
	lat := make(latencies, len(f.committed))
	for i := range lat {
		// The change can be seen a moment before the client hears the
		// COMMIT's answer: that counts as no delay.
		lat[i] = max(0, f.seenAt[i].Sub(f.committed[i]))
	}
	return lat, cpu, db
}

// ms formats a duration in milliseconds.
func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }

// mb formats bytes in MiB.
func mb(n int64) string { return fmt.Sprintf("%dMB", n>>20) }

// ratio is a/b, or 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// schedule calls do(i) for i in [0, n) at rate per second, each at its
// planned time (or at once when late), and returns when all have run or
// ctx ends. do's error fails the benchmark.
func schedule(ctx context.Context, tb testing.TB, n, rate int, do func(i int) error) {
	start := time.Now()
	for i := 0; i < n; i++ {
		at := start.Add(time.Duration(i) * time.Second / time.Duration(rate))
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if err := do(i); err != nil {
			tb.Errorf("change %d: %v", i, err)
			return
		}
	}
}

// esCount is the number of searchable documents in index (0 while missing).
func esCount(ctx context.Context, esURL, index string) (int, error) {
	var r struct {
		Count int `json:"count"`
	}
	code, err := testenv.ESRequest(ctx, http.MethodGet, esURL+"/"+url.PathEscape(index)+"/_count", nil, &r)
	if code == http.StatusNotFound {
		return 0, err
	}
	return r.Count, err
}

// waitSlotActive waits until the replication slot exists and a process
// streams from it.
func waitSlotActive(tb testing.TB, p *proc, pg *testenv.PG, slot string) {
	tb.Helper()
	waitUntil(tb, p, p.Name+" to stream from slot "+slot, 5*time.Minute, 100*time.Millisecond, func() (bool, error) {
		var active bool
		err := pg.Pool.QueryRow(context.Background(), `SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active)
		return active, err
	})
}

// idleCores is the CPU the process uses while nothing changes: cores over 5s.
func idleCores(p *proc) float64 {
	const window = 5 * time.Second
	c0 := p.cpu()
	time.Sleep(window)
	return (p.cpu() - c0) / window.Seconds()
}

// writerApp is the application_name of the connections that write the
// workload's changes; their server CPU is not the tools'.
const writerApp = "peers-writer"

// writer opens a pool on pg's database for the workload's changes.
func writer(tb testing.TB, pg *testenv.PG) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(pg.DSN)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = writerApp
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// dbCPU reads the CPU seconds used so far by each PostgreSQL server process
// connected to pg's database (backends and walsenders), by pid, except the
// workload writer's and the one running this query.
func dbCPU(tb testing.TB, pg *testenv.PG) map[int]float64 {
	tb.Helper()
	rows, err := pg.Pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid() AND coalesce(application_name, '') <> $1`, writerApp)
	if err != nil {
		tb.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		tb.Fatal(err)
	}
	out := map[int]float64{}
	for _, pid := range pids {
		if f := statFields(int(pid)); len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			out[int(pid)] = float64(u+s) / clockTicks
		}
	}
	return out
}

// dbCPUSince is the database CPU used since the dbCPU reading start, by the
// processes connected now (one that disconnected meanwhile is not counted).
func dbCPUSince(tb testing.TB, pg *testenv.PG, start map[int]float64) float64 {
	tb.Helper()
	var total float64
	for pid, c := range dbCPU(tb, pg) {
		total += c - start[pid]
	}
	return total
}

// freePortNumber is the port number of a free 127.0.0.1 port.
func freePortNumber(tb testing.TB) string {
	_, port, _ := net.SplitHostPort(testenv.FreePort(tb))
	return port
}
