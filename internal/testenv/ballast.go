package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// HoldFreeMemory grows the benchmarks' page-cache ballast until the
// machine's free memory is about DECANT_BENCH_BALLAST_FREE_MB again
// (e2e/infra/ballast.sh fill; DECANT_BENCH_BALLAST=0 makes it a no-op).
// Call it before a timed run, after whatever the run before it deleted:
// memory freed on these virtual machines is handed back to the host, and
// writing into it again costs several times the CPU of reused memory
// (docs/performance.md, thirty-seventh pass), so a timed run would
// otherwise pay for what the one before it freed.
func HoldFreeMemory(tb testing.TB) {
	tb.Helper()
	out, err := exec.Command("bash", filepath.Join(RepoRoot(), "e2e", "infra", "ballast.sh"), "fill").CombinedOutput()
	if err != nil {
		tb.Fatalf("e2e/infra/ballast.sh fill: %v\n%s", err, out)
	}
	tb.Log(strings.TrimSpace(string(out)))
}
