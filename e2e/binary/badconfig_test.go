package binary

import (
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestBadConfigFailsBeforeSideEffects: each bad configuration makes
// `decant run` exit 2 with a message naming the key or server and what to
// do, and creates no slot, topic or index (PRODUCT.md §6.5).
func TestBadConfigFailsBeforeSideEffects(t *testing.T) {
	p := newPipeline(t)
	// A role that must authenticate (pg_hba: scram for decant_pw), for the wrong-password case.
	_, _ = p.PG.Pool.Exec(context.Background(), `DO $$ BEGIN CREATE ROLE decant_pw LOGIN PASSWORD 'right-secret'; EXCEPTION WHEN duplicate_object THEN NULL; END $$`)
	good := func() string {
		b, err := exec.Command("cat", p.Config).Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}()
	dsn := p.PG.DSN
	wrongPW := strings.Replace(dsn, "postgres://postgres@", "postgres://decant_pw:wrong-secret@", 1)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The keyword/value form, a quoted password with spaces in it.
	wrongKV := fmt.Sprintf("host=%s port=%s user = decant_pw password='wrong secret words' dbname=%s sslmode=disable", u.Hostname(), u.Port(), p.PG.Name)
	for _, c := range []struct {
		name    string
		config  string
		env     []string
		want    string // regexp the output must match
		secrets []string
	}{
		{name: "unknown key", config: strings.Replace(good, "  topic_prefix:", "  topic_prefx:", 1),
			want: `bad\.yaml:\d+:3: kafka\.topic_prefx: unknown key; did you mean "topic_prefix"\?`},
		{name: "wrong type", config: strings.Replace(good, "  partitions: 2", "  partitions: many", 1),
			want: `bad\.yaml:\d+:15: kafka\.partitions: "many" is not a whole number`},
		{name: "bad env override", config: good, env: []string{"DECANT_KAFKA_PARTITIONS=zero"},
			want: `DECANT_KAFKA_PARTITIONS \(kafka\.partitions\): "zero" is not a whole number`},
		{name: "unreachable kafka", config: good, env: []string{"DECANT_KAFKA_BROKERS=127.0.0.1:1"},
			want: `kafka at \[127\.0\.0\.1:1\] is not reachable.*check kafka\.brokers`},
		{name: "unreachable elasticsearch", config: good, env: []string{"DECANT_ELASTICSEARCH_URLS=http://127.0.0.1:1"},
			want: `elasticsearch at \[http://127\.0\.0\.1:1\] is not reachable.*check elasticsearch\.urls`},
		{name: "unreachable postgres", config: good, env: []string{"DECANT_POSTGRES_DSN=postgres://postgres@127.0.0.1:1/x?connect_timeout=3"},
			want: `(?s)connecting to PostgreSQL at postgres://postgres@127\.0\.0\.1:1/x.*check postgres\.dsn`},
		{name: "wrong password", config: good, env: []string{"DECANT_POSTGRES_DSN=" + wrongPW},
			want: `password authentication failed for user "decant_pw".*check postgres\.dsn`, secrets: []string{"wrong-secret"}},
		{name: "redacting a primary key", config: good + "streamer:\n  redact:\n    public.items: {mask: [id]}\n",
			want: `streamer\.redact\.public\.items\.mask: column "id" is part of the primary key of public\.items, which keys its raw topic: it cannot be redacted`},
		{name: "masking a watched column", config: good + "streamer:\n  redact:\n    public.items: {exclude: [category_id]}\n",
			want: `streamer\.redact\.public\.items\.exclude: column "category_id" is watched for changes \(item [^)]*\): the map stage compares its before and after values, which excluding would hide; hash it instead`},
		{name: "hashing without a salt", config: good + "streamer:\n  redact:\n    public.items: {hash: [blob]}\n",
			want: `bad\.yaml:\d+:\d+: streamer\.redact\.public\.items\.hash: hashing needs a salt: set the environment variable DECANT_HASH_SALT`},
		{name: "redacting a column that does not exist", config: good + "streamer:\n  redact:\n    public.items: {exclude: [sssn]}\n",
			want: `streamer\.redact\.public\.items\.exclude: table public\.items has no column "sssn"`},
		{name: "wrong password with spaces", config: good, env: []string{"DECANT_POSTGRES_DSN=" + wrongKV},
			want: `password authentication failed for user "decant_pw".*check postgres\.dsn`, secrets: []string{"secret words", "wrong secret"}},
		{name: "unreachable elasticsearch with credentials", config: good, env: []string{"DECANT_ELASTICSEARCH_URLS=http://elastic:es-top-secret@127.0.0.1:1"},
			want: `elasticsearch at \[http://elastic:xxxxx@127\.0\.0\.1:1\] is not reachable.*check elasticsearch\.urls`, secrets: []string{"es-top-secret"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := p.Write("bad.yaml", c.config)
			cmd := testenv.DecantCmd(t, c.env, "run", "--config", path)
			out, code := runToExit(t, cmd, 90*time.Second)
			if code != 2 {
				t.Fatalf("exit code %d, want 2; output:\n%s", code, out)
			}
			if !regexp.MustCompile(c.want).Match(out) {
				t.Fatalf("output does not match %q:\n%s", c.want, out)
			}
			for _, s := range c.secrets {
				if strings.Contains(string(out), s) {
					t.Fatalf("output leaks the secret %q:\n%s", s, out)
				}
			}
		})
	}
	// Nothing was created by any of the runs.
	var slots int
	if err := p.PG.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, p.PG.Name).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("replication slots created by failed runs: %d (%v)", slots, err)
	}
	var pubs int
	if err := p.PG.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_publication`).Scan(&pubs); err != nil || pubs != 0 {
		t.Errorf("publications created by failed runs: %d (%v)", pubs, err)
	}
	topics, err := p.Kafka.Admin.ListTopics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, p.Kafka.Prefix+".") {
			t.Errorf("topic %s created by a failed run", name)
		}
	}
	if code, body, _ := testenv.Get(p.ES.URL + "/" + p.ES.Prefix + "*"); code != 200 || strings.TrimSpace(body) != "{}" {
		t.Errorf("indexes created by failed runs: %d %s", code, body)
	}
}

// runToExit runs cmd and returns its output and exit code (-1 when it did
// not start or was killed); the test fails when it runs past timeout.
func runToExit(t *testing.T, cmd *exec.Cmd, timeout time.Duration) ([]byte, int) {
	t.Helper()
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		t.Fatalf("%s did not exit within %s", strings.Join(cmd.Args, " "), timeout)
	}
	code := -1
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return out, code
}
