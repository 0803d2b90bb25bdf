package chaos

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// servers restarts the test servers through the e2e/infra scripts, with
// the environment that selects the instance the test talks to.
type servers struct {
	dir     string   // DECANT_INFRA_DIR of the instance
	env     []string // environment of every script run
	scripts string   // e2e/infra
}

// serverKinds are the servers TestChaos restarts, by script name.
var serverKinds = []string{"kafka", "es", "pg"}

// newServers derives the scripts' environment from the servers the tests
// use and checks that DECANT_INFRA_DIR owns exactly those servers, so a
// restart can never hit another instance (the shared default servers,
// when the test points elsewhere).
func newServers(t *testing.T) *servers {
	t.Helper()
	dir := os.Getenv("DECANT_INFRA_DIR")
	if dir == "" {
		dir = "/tmp/decant-infra" // as e2e/infra/common.sh and the Makefile
	}
	pgPort, err := localPort(testenv.PGAdminDSN(), "DECANT_TEST_PG_DSN")
	if err != nil {
		t.Fatal(err)
	}
	brokers := testenv.KafkaBrokers()
	if len(brokers) != 1 {
		t.Fatalf("DECANT_TEST_KAFKA_BROKERS=%s: TestChaos restarts one local broker; give exactly one", strings.Join(brokers, ","))
	}
	kafkaPort, err := localPort("tcp://"+brokers[0], "DECANT_TEST_KAFKA_BROKERS")
	if err != nil {
		t.Fatal(err)
	}
	esPort, err := localPort(testenv.ESURL(), "DECANT_TEST_ES_URL")
	if err != nil {
		t.Fatal(err)
	}

	var problems []string
	// Each server's own state under dir must name the port the tests use.
	pgConf, _ := os.ReadFile(filepath.Join(dir, "data", "pg", "postgresql.conf"))
	if !regexp.MustCompile(`(?m)^port = ` + pgPort + `\b`).Match(pgConf) {
		problems = append(problems, fmt.Sprintf("%s/data/pg/postgresql.conf does not set port = %s", dir, pgPort))
	}
	kafkaProps, _ := os.ReadFile(filepath.Join(dir, "data", "kafka", "server.properties"))
	if !bytes.Contains(kafkaProps, []byte("PLAINTEXT://127.0.0.1:"+kafkaPort+",")) {
		problems = append(problems, fmt.Sprintf("%s/data/kafka/server.properties does not listen on 127.0.0.1:%s", dir, kafkaPort))
	}
	controllerPort := ""
	if m := regexp.MustCompile(`CONTROLLER://127\.0\.0\.1:(\d+)`).FindSubmatch(kafkaProps); m != nil {
		controllerPort = string(m[1])
	}
	esArgs := esCmdline(dir)
	if !contains(esArgs, "http.port="+esPort) {
		problems = append(problems, fmt.Sprintf("no Elasticsearch node of %s (pids/es.pid) serves http.port=%s", dir, esPort))
	}
	transportPort := ""
	for _, a := range esArgs {
		if p, ok := strings.CutPrefix(a, "transport.port="); ok {
			transportPort = p
		}
	}
	want := map[string]string{
		"DECANT_PG_PORT": pgPort, "DECANT_KAFKA_PORT": kafkaPort, "DECANT_ES_PORT": esPort,
		"DECANT_KAFKA_CONTROLLER_PORT": controllerPort, "DECANT_ES_TRANSPORT_PORT": transportPort,
	}
	for k, v := range want {
		if set := os.Getenv(k); set != "" && v != "" && set != v {
			problems = append(problems, fmt.Sprintf("%s=%s but the instance uses %s", k, set, v))
		}
	}
	if len(problems) > 0 {
		t.Fatalf("TestChaos restarts the servers it tests through e2e/infra, and DECANT_INFRA_DIR=%s is not the instance of "+
			"DECANT_TEST_PG_DSN/DECANT_TEST_KAFKA_BROKERS/DECANT_TEST_ES_URL (PostgreSQL :%s, Kafka :%s, Elasticsearch :%s):\n  %s\n"+
			"set DECANT_INFRA_DIR to the directory the servers were started with (e2e/infra/up.sh)",
			dir, pgPort, kafkaPort, esPort, strings.Join(problems, "\n  "))
	}
	s := &servers{dir: dir, scripts: filepath.Join(testenv.RepoRoot(), "e2e", "infra")}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); want[k] == "" && k != "DECANT_INFRA_DIR" {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "DECANT_INFRA_DIR="+dir)
	for k, v := range want {
		s.env = append(s.env, k+"="+v)
	}
	return s
}

// localPort returns the port of a 127.0.0.1/localhost URL.
func localPort(raw, name string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return "", fmt.Errorf("%s=%s: no port: %w", name, raw, err)
	}
	if host != "127.0.0.1" && host != "localhost" {
		return "", fmt.Errorf("%s=%s: TestChaos restarts servers on this host only (127.0.0.1)", name, raw)
	}
	return port, nil
}

// esCmdline is the command line of the Elasticsearch node whose pid file
// is under dir, or nil.
func esCmdline(dir string) []string {
	pid, err := os.ReadFile(filepath.Join(dir, "pids", "es.pid"))
	if err != nil {
		return nil
	}
	b, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/cmdline")
	if err != nil {
		return nil
	}
	args := strings.Split(string(b), "\x00")
	if !contains(args, "path.home="+filepath.Join(dir, "data", "es", "home")) {
		return nil
	}
	return args
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// run runs `bash e2e/infra/<kind>.sh <action>` and returns its output on error.
func (s *servers) run(ctx context.Context, kind, action string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(s.scripts, kind+".sh"), action)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s.sh %s: %v\n%s", kind, action, err, out)
	}
	return nil
}

// up starts a server, retrying once (a port may still be in TIME_WAIT).
func (s *servers) up(ctx context.Context, kind string) error {
	err := s.run(ctx, kind, "up")
	if err != nil {
		time.Sleep(3 * time.Second)
		err = s.run(ctx, kind, "up")
	}
	return err
}

func (s *servers) down(ctx context.Context, kind string) error { return s.run(ctx, kind, "down") }
