package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RepoRoot is the repository's top directory (found from this file, so it
// works from any package's test binary).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// RepoFile reads a file of the repository, path relative to its root.
func RepoFile(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(), path))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// ShopDDL is the DDL of the demo shop, examples/shop/schema.sql without its
// data: everything before its first INSERT. Tests that need the shop's
// tables load it from there rather than keep a copy.
func ShopDDL(tb testing.TB) string {
	tb.Helper()
	schema := RepoFile(tb, "examples/shop/schema.sql")
	i := strings.Index(schema, "\nINSERT INTO ")
	if i < 0 {
		tb.Fatal("examples/shop/schema.sql: no INSERT INTO after the DDL")
	}
	return schema[:i+1]
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Decant builds ./cmd/decant once per test process, into a directory of
// its own under os.TempDir (so a bin/decant in use elsewhere is left
// alone), and returns the binary's path. Test binaries that call it
// should remove the directory when they end: see RemoveDecant.
func Decant(tb testing.TB) string {
	tb.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "decant-test-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "decant")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/decant")
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/decant: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		tb.Fatal(buildErr)
	}
	return binPath
}

// RemoveDecant removes the binary Decant built, if any; call it from
// TestMain after m.Run.
func RemoveDecant() {
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
}

// DecantEnv is the environment for a decant child process: this process's,
// without the DECANT_ variables that are not DECANT_TEST_ ones (decant
// refuses variables that name no config key, such as DECANT_HEAVY), plus
// extra.
func DecantEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DECANT_") || strings.HasPrefix(kv, "DECANT_TEST_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// DecantCmd is `decant args...` with DecantEnv(env...), not started.
func DecantCmd(tb testing.TB, env []string, args ...string) *exec.Cmd {
	tb.Helper()
	cmd := exec.Command(Decant(tb), args...)
	cmd.Env = DecantEnv(env...)
	return cmd
}

// WriteFile writes content to path, creating its directory, and returns
// path.
func WriteFile(tb testing.TB, path, content string) string {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}
