package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// zombieMapping keeps deletes in Elasticsearch's memory for one second
// only (index.gc_deletes, 60s by default), so that the test can wait past
// it.
const zombieMapping = `version: 1
aggregates:
  item:
    table: items
    columns: [id, name]
    elasticsearch:
      index: IDX_item
      settings: {number_of_shards: 1, number_of_replicas: 0, gc_deletes: 1s}
`

// TestZombieBuildMemberIsFenced is issue 15's items 2 and 6: a build
// member paused while it holds built documents, past its session timeout,
// must not write them once resumed: its successor has rebuilt the
// aggregate and since written its deletion. Unfenced (the code before
// issue 15), the paused member appended its older version after the
// successor's tombstone in the aggregate topic (versions going back) and
// re-created the deleted document in Elasticsearch, which had forgotten
// the delete after index.gc_deletes. DECANT_TEST_UNFENCED=1 runs both
// members unfenced, to see that.
//
// The member (a child process, session timeout 10 s) stops itself with
// SIGSTOP just before writing a document containing a marker
// (resolver.StopBeforeWriteEnv): the only way to pause it at that point.
func TestZombieBuildMemberIsFenced(t *testing.T) {
	e := newResEnv(t, `CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL);
		ALTER TABLE items REPLICA IDENTITY FULL;
		INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 40) g;`, zombieMapping)
	ctx := testenv.Ctx(t)
	marker := "zombie-" + testenv.Suffix()
	e.startStreamer()
	e.startMapper("map")
	zombie, err := e.startChildSpec(1, resChildSpec{Stage: "build", StopBeforeWrite: marker, Unfenced: os.Getenv("DECANT_TEST_UNFENCED") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the initial load of 40 items", 2*time.Minute, func() (bool, error) {
		got := e.esCount(t, "item", nil)
		return got == 40, fmt.Errorf("%d items in Elasticsearch", got)
	})
	e.waitQuiet(2 * time.Minute)

	// The member builds item 7 with the marker and stops before writing it.
	e.pg.Exec(t, `UPDATE items SET name = $1 WHERE id = 7`, marker)
	testenv.WaitFor(t, "the build member to stop itself holding item 7", time.Minute, func() (bool, error) {
		st, err := procState(zombie.Pid())
		return st == "T", fmt.Errorf("state %q (%v)\n%s", st, err, zombie.Tail(5))
	})
	t.Cleanup(func() { zombie.Signal(syscall.SIGCONT) })

	// Its successor takes the partitions once the session times out,
	// builds item 7 again, then its deletion.
	successor, err := e.startChildSpec(2, resChildSpec{Stage: "build", Unfenced: os.Getenv("DECANT_TEST_UNFENCED") == "1"})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, "the successor to write item 7", time.Minute, func() (bool, error) {
		return e.esHas(t, "item", "7"), fmt.Errorf("not yet\n%s", successor.Tail(5))
	})
	e.pg.Exec(t, `DELETE FROM items WHERE id = 7`)
	testenv.WaitFor(t, "the successor to delete item 7", time.Minute, func() (bool, error) {
		state, _ := e.aggTopicState("item")
		_, inTopic := state[`{"id":7}`]
		return !inTopic && !e.esHas(t, "item", "7"), fmt.Errorf("in the aggregate topic: %v\n%s", inTopic, successor.Tail(5))
	})
	// Elasticsearch forgets the delete after gc_deletes (1 s); it prunes
	// its tombstones when it refreshes.
	time.Sleep(3 * time.Second)
	e.pg.Exec(t, `UPDATE items SET name = 'touched' WHERE id = 8`)
	e.waitQuiet(time.Minute)
	if err := e.search.Refresh(ctx, "item"); err != nil {
		t.Fatal(err)
	}

	// The paused member resumes with item 7 in hand.
	zombie.Signal(syscall.SIGCONT)
	// Fenced, its write fails and its session ends; unfenced, the write
	// lands and its offset commit fails (the group moved on).
	testenv.WaitFor(t, "the resumed member's session to end", time.Minute, func() (bool, error) {
		out := zombie.Output()
		return strings.Contains(out[strings.Index(out, "test hook"):], "session ended"), fmt.Errorf("not yet\n%s", zombie.Tail(5))
	})
	e.waitQuiet(2 * time.Minute)

	var problems []string
	if e.esHas(t, "item", "7") {
		problems = append(problems, "elasticsearch: item 7, deleted in PostgreSQL, was re-created by the resumed member")
	}
	state, vp := e.aggTopicState("item")
	problems = append(problems, vp...)
	if doc, ok := state[`{"id":7}`]; ok {
		problems = append(problems, fmt.Sprintf("aggregate topic: item 7, deleted in PostgreSQL, ends with %s", doc))
	}
	if len(state) != 39 {
		problems = append(problems, fmt.Sprintf("aggregate topic: %d items, want 39", len(state)))
	}
	if got := e.esCount(t, "item", nil); got != 39 {
		problems = append(problems, fmt.Sprintf("elasticsearch: %d items, want 39", got))
	}
	if out := strings.ToLower(zombie.Output()); !strings.Contains(out[strings.Index(out, "test hook"):], "fenc") {
		problems = append(problems, "the resumed member logged no fencing: did it hold item 7?\n"+zombie.Tail(30))
	}
	t.Logf("resumed member's last lines:\n%s", zombie.Tail(12))
	resReport(t, problems)
}

// procState is the state letter of process pid (R, S, T for stopped, …).
func procState(pid int) (string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", err
	}
	// pid (comm) state …: comm may contain spaces, the state follows its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return "", fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	return string(b[i+2]), nil
}

// esHas says whether the aggregate's alias has the document id (a
// realtime get: no refresh needed).
func (e *resEnv) esHas(t *testing.T, aggregate, id string) bool {
	t.Helper()
	g := e.es.Client.Get
	res, err := g(e.model.Aggregate(aggregate).Index, id, g.WithContext(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	return res.StatusCode == 200
}
