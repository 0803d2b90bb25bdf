package testenv

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// AllReplicaIdentityFull sets REPLICA IDENTITY FULL on every table of the
// public schema, for test schemas whose every table a mapping links (the
// map stage needs link columns in the before image). Run it after the
// CREATE TABLEs.
const AllReplicaIdentityFull = `
DO $$
DECLARE t regclass;
BEGIN
  FOR t IN SELECT oid::regclass FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' LOOP
    EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', t);
  END LOOP;
END $$;
`

// ItemsSchema is the schema of the small whole-pipeline tests: categories
// and their items (through items.category_id, with REPLICA IDENTITY FULL
// as a one-to-many relation needs), and two categories. items.blob is
// never mapped: it only makes raw events large.
const ItemsSchema = `
CREATE TABLE categories (id int PRIMARY KEY, title text NOT NULL);
CREATE TABLE items (id int PRIMARY KEY, name text NOT NULL, category_id int REFERENCES categories(id), blob text);
CREATE INDEX ON items (category_id);
ALTER TABLE items REPLICA IDENTITY FULL;
INSERT INTO categories VALUES (1, 'tools'), (2, 'toys');
`

// PipelineSpec describes one aggregate's whole pipeline for NewPipeline.
type PipelineSpec struct {
	Schema    string // SQL run on the fresh database
	Aggregate string // aggregate name; its index alias is <index prefix>-<Aggregate>
	Mapping   string // mapping YAML with one %s for the index alias
	OracleSQL string // rows (id text, document json) that decant should index; see Oracle
	HTTP      bool   // give decant's HTTP port a free address (otherwise it is off)
	// PGAddr and ESAddr, when set, replace the host:port through which
	// decant reaches PostgreSQL and Elasticsearch (proxies).
	PGAddr, ESAddr string
	// PGAdmin is the maintenance DSN of the server the test's database is
	// created on (PostgresOn). Default: PGAdminDSN().
	PGAdmin string
}

// Pipeline is one test's database, topic prefix, index prefix, slot, and a
// directory holding decant.yaml and mappings/<aggregate>.yaml for the
// decant binary.
type Pipeline struct {
	T       *testing.T
	PG      *PG
	Kafka   *KafkaEnv
	ES      *ESEnv
	Dir     string
	Config  string // path of decant.yaml
	Mapping string // path of the mapping file
	Slot    string
	Alias   string
	HTTP    string // host:port of decant's HTTP port, or ""
	Docs    Index  // the alias and its oracle
}

// NewPipeline creates the servers' side of spec and writes the config.
func NewPipeline(t *testing.T, spec PipelineSpec) *Pipeline {
	t.Helper()
	if spec.PGAdmin == "" {
		spec.PGAdmin = PGAdminDSN()
	}
	p := &Pipeline{T: t, PG: PostgresOn(t, spec.PGAdmin), Kafka: Kafka(t), ES: Elasticsearch(t), Dir: t.TempDir(), Slot: "decant_" + Suffix()}
	p.Alias = p.ES.Prefix + "-" + spec.Aggregate
	if spec.HTTP {
		p.HTTP = FreePort(t)
	}
	p.Docs = Index{ESURL: p.ES.URL, Alias: p.Alias, Pool: p.PG.Pool, OracleSQL: spec.OracleSQL}
	p.PG.Exec(t, spec.Schema)
	p.Mapping = p.Write("mappings/"+spec.Aggregate+".yaml", fmt.Sprintf(spec.Mapping, p.Alias))
	p.Config = p.Write("decant.yaml", fmt.Sprintf(`postgres:
  dsn: %s
  publication: decant
  slot: %s
kafka:
  brokers: [%s]
  topic_prefix: %s
  partitions: 2
elasticsearch:
  urls: [%s]
mappings: [mappings/*.yaml]
http:
  listen: %q
`, via(p.PG.DSN, spec.PGAddr), p.Slot, strings.Join(p.Kafka.Brokers, ","), p.Kafka.Prefix, via(p.ES.URL, spec.ESAddr), p.HTTP))
	return p
}

// via replaces the host:port of a URL with addr (when not empty).
func via(rawURL, addr string) string {
	if addr == "" {
		return rawURL
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(err)
	}
	u.Host = addr
	return u.String()
}

// Write writes a file under the pipeline's directory and returns its path.
func (p *Pipeline) Write(name, content string) string {
	return WriteFile(p.T, filepath.Join(p.Dir, name), content)
}

// Start runs `decant args... --config <Config>` with env added, logging to
// <Dir>/<name>.log; it is killed at cleanup.
func (p *Pipeline) Start(name string, env []string, args ...string) *Proc {
	p.T.Helper()
	cmd := DecantCmd(p.T, env, append(args, "--config", p.Config)...)
	return Start(p.T, name, filepath.Join(p.Dir, name+".log"), cmd)
}

// Decant runs `decant args... --config <Config>` to its end and returns
// its combined output.
func (p *Pipeline) Decant(args ...string) (string, error) {
	p.T.Helper()
	out, err := DecantCmd(p.T, nil, append(args, "--config", p.Config)...).CombinedOutput()
	return string(out), err
}

// ESDocs reads the alias's documents: id → canonical _source.
func (p *Pipeline) ESDocs() (map[string]string, error) { return ESDocs(p.ES.URL, p.Alias) }

// Mismatches compares Elasticsearch with the oracle now.
func (p *Pipeline) Mismatches() []string { return p.Docs.Mismatches(p.T) }

// WaitConverged waits until Elasticsearch equals the oracle.
func (p *Pipeline) WaitConverged(timeout time.Duration) {
	p.T.Helper()
	p.Docs.WaitConverged(p.T, timeout)
}
