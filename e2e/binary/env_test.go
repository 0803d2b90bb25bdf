package binary

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// decantBin builds cmd/decant once per test run.
func decantBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		binPath = filepath.Join(os.TempDir(), fmt.Sprintf("decant-e2e-%d", os.Getpid()))
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/decant")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// pipeline is one test's database, topic prefix, index prefix and config.
type pipeline struct {
	t      *testing.T
	pg     *testenv.PG
	k      *testenv.KafkaEnv
	es     *testenv.ESEnv
	dir    string
	config string
	alias  string
}

const itemsSchema = `
CREATE TABLE categories (id int PRIMARY KEY, title text NOT NULL);
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, category_id int REFERENCES categories(id));
CREATE INDEX ON items (category_id);
ALTER TABLE items REPLICA IDENTITY FULL;
INSERT INTO categories VALUES (1, 'tools'), (2, 'toys');
`

func newPipeline(t *testing.T) *pipeline {
	p := &pipeline{t: t, pg: testenv.Postgres(t), k: testenv.Kafka(t), es: testenv.Elasticsearch(t), dir: t.TempDir()}
	p.alias = p.es.Prefix + "-item"
	p.pg.Exec(t, itemsSchema)
	mapping := fmt.Sprintf(`version: 1
schema: public
aggregates:
  item:
    table: items
    columns: [id, name]
    relations:
      category:
        table: categories
        references: category_id
        columns: [title]
    elasticsearch:
      index: %s
      settings: {number_of_shards: 1, number_of_replicas: 0}
`, p.alias)
	if err := os.MkdirAll(filepath.Join(p.dir, "mappings"), 0o755); err != nil {
		t.Fatal(err)
	}
	p.write("mappings/items.yaml", mapping)
	p.config = p.write("decant.yaml", fmt.Sprintf(`postgres:
  dsn: %s
  publication: decant
  slot: decant_%s
kafka:
  brokers: [%s]
  topic_prefix: %s
  partitions: 2
elasticsearch:
  urls: [%s]
mappings: [mappings/*.yaml]
http:
  listen: ""
`, p.pg.DSN, testenv.Suffix(), strings.Join(p.k.Brokers, ","), p.k.Prefix, p.es.URL))
	return p
}

func (p *pipeline) write(name, content string) string {
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// proc is a decant process.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs `decant args...` with extra env; output goes to a log file.
func (p *pipeline) start(name string, env []string, args ...string) *proc {
	p.t.Helper()
	logPath := filepath.Join(p.dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	cmd := exec.Command(decantBin(p.t), args...)
	// Only the test's own DECANT_ variables reach decant: it refuses unknown ones.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DECANT_") || strings.HasPrefix(kv, "DECANT_TEST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	pr := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { pr.err = cmd.Wait(); f.Close(); close(pr.done) }()
	p.t.Cleanup(func() { pr.kill() })
	return pr
}

func (pr *proc) kill() {
	_ = pr.cmd.Process.Signal(syscall.SIGKILL)
	<-pr.done
}

// term sends SIGTERM and returns the exit code (or -1 after 60s).
func (pr *proc) term() int {
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pr.done:
		return pr.cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		pr.kill()
		return -1
	}
}

func (pr *proc) output() string {
	b, _ := os.ReadFile(pr.log)
	return string(b)
}

// freePort returns a free 127.0.0.1 port.
func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// lsn reads pg_current_wal_lsn().
func (p *pipeline) lsn() string {
	var s string
	if err := p.pg.Pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		p.t.Fatal(err)
	}
	return s
}

// get fetches url and returns status and body.
func get(url string) (int, string, error) {
	res, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), nil
}

// esDocs reads every document of the alias: id → _source.
func (p *pipeline) esDocs() (map[string]json.RawMessage, error) {
	p.t.Helper()
	_, _, _ = get(p.es.URL + "/" + p.alias + "/_refresh")
	code, body, err := get(p.es.URL + "/" + p.alias + "/_search?size=10000")
	if err != nil || code != 200 {
		return nil, fmt.Errorf("search %s: %d %v %.200s", p.alias, code, err, body)
	}
	var sr struct {
		Hits struct {
			Hits []struct {
				ID     string          `json:"_id"`
				Source json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal([]byte(body), &sr); err != nil {
		p.t.Fatal(err)
	}
	out := map[string]json.RawMessage{}
	for _, h := range sr.Hits.Hits {
		out[h.ID] = h.Source
	}
	return out, nil
}

// oracle computes the expected documents independently of decant's SQL.
func (p *pipeline) oracle() map[string]json.RawMessage {
	p.t.Helper()
	rows, err := p.pg.Pool.Query(context.Background(), `
SELECT i.id::text, jsonb_build_object('id', i.id, 'name', i.name,
  'category', CASE WHEN c.id IS NULL THEN NULL ELSE jsonb_build_object('title', c.title) END)
FROM items i LEFT JOIN categories c ON c.id = i.category_id`)
	if err != nil {
		p.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]json.RawMessage{}
	for rows.Next() {
		var id string
		var doc json.RawMessage
		if err := rows.Scan(&id, &doc); err != nil {
			p.t.Fatal(err)
		}
		out[id] = doc
	}
	return out
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// converged reports the mismatches between Elasticsearch and the oracle.
func (p *pipeline) mismatches() []string {
	got, err := p.esDocs()
	if err != nil {
		return []string{err.Error()}
	}
	want := p.oracle()
	var out []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			out = append(out, "missing "+id)
		} else if !jsonEqual(g, w) {
			out = append(out, fmt.Sprintf("%s: es %s, db %s", id, g, w))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			out = append(out, "extra "+id)
		}
	}
	return out
}

// waitConverged waits until Elasticsearch equals the oracle.
func (p *pipeline) waitConverged(timeout time.Duration) {
	p.t.Helper()
	var last []string
	testenv.WaitFor(p.t, "Elasticsearch to equal the database", timeout, func() (bool, error) {
		last = p.mismatches()
		if len(last) > 5 {
			return false, fmt.Errorf("%d mismatches, e.g. %v", len(last), last[:5])
		}
		return len(last) == 0, fmt.Errorf("mismatches: %v", last)
	})
}
