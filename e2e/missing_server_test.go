package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestMissingServerFailsUnderCI runs each smoke test in a child `go test`
// with that server's address pointing at a closed port and CI=true: the
// child must fail (not skip) and name the server.
func TestMissingServerFailsUnderCI(t *testing.T) {
	testenv.Integration(t)
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go toolchain not on PATH: %v", err)
	}
	wd, _ := os.Getwd()
	for _, c := range []struct{ test, env, server string }{
		{"TestSmokePostgresLogicalReplication", "DECANT_TEST_PG_DSN=postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "PostgreSQL"},
		{"TestSmokeKafka", "DECANT_TEST_KAFKA_BROKERS=127.0.0.1:1", "Kafka"},
		{"TestSmokeElasticsearch", "DECANT_TEST_ES_URL=http://127.0.0.1:1", "Elasticsearch"},
	} {
		t.Run(c.server, func(t *testing.T) {
			cmd := exec.Command(goBin, "test", "-count=1", "-run", "^"+c.test+"$", ".")
			cmd.Dir = filepath.Clean(wd)
			cmd.Env = append(os.Environ(), "CI=true", c.env)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("%s passed with %s unreachable under CI=true:\n%s", c.test, c.server, out)
			}
			if !strings.Contains(string(out), c.server+" is not reachable") || strings.Contains(string(out), "--- SKIP") {
				t.Fatalf("%s: want a failure naming %s, got:\n%s", c.test, c.server, out)
			}
		})
	}
}
