// Package lazyfree makes the Go runtime give the heap's free pages back to
// Linux lazily (MADV_FREE) rather than at once (MADV_DONTNEED, the
// runtime's default since Go 1.16).
//
// A load's garbage is collected and its pages returned, then the heap
// grows again: with MADV_DONTNEED each of those pages is faulted in and
// zeroed anew, and in a virtual machine that hands freed memory back to
// its host, each fault also costs the host's (docs/performance.md,
// thirty-seventh pass: 180,000 minor faults against 70,000 in the same
// Kafka-sink-only run). With MADV_FREE the kernel takes the pages only
// when it needs memory, and the heap reuses them without a fault. The
// resident set then stays near its high-water mark after a burst; the
// pages are counted as reclaimable (inactive_file, outside a container's
// working set) and the kernel takes them back under memory pressure.
//
// The runtime reads the setting from GODEBUG once, at start, and a
// //go:debug directive cannot name it, so Ensure starts the program again
// with it. GODEBUG naming madvdontneed is the user's choice and is left
// alone (GODEBUG=madvdontneed=1 restores the runtime's default).
package lazyfree

import (
	"os"
	"runtime"
	"strings"
	"syscall"
)

// Setting is what Env adds to GODEBUG.
const Setting = "madvdontneed=0"

// Env returns env with Setting added to GODEBUG, and true; or env
// unchanged and false when GODEBUG already names madvdontneed.
func Env(env []string) ([]string, bool) {
	out := make([]string, 0, len(env)+1)
	value, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			value, found = v, true // the last one counts, as for getenv
			continue
		}
		out = append(out, kv)
	}
	for field := range strings.SplitSeq(value, ",") {
		if strings.HasPrefix(field, "madvdontneed=") {
			return env, false
		}
	}
	if found && value != "" {
		value += ","
	}
	return append(out, "GODEBUG="+value+Setting), true
}

// Ensure, on Linux, replaces the running program with itself under Env's
// environment, unless that changes nothing. It returns when there is
// nothing to do, on other systems, or when the program cannot be started
// again (the runtime's default then stays). Call it first in main, before
// any goroutine, file or socket of the program's own.
func Ensure() {
	if runtime.GOOS != "linux" {
		return
	}
	env, changed := Env(os.Environ())
	if !changed {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, env) // returns only on failure
}
