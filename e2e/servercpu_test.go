package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// serverCPU is the CPU time, in seconds, each test server has used: the
// processes whose pids e2e/infra writes under $DECANT_INFRA_DIR/pids
// (Elasticsearch, Kafka, OpenSearch, PostgreSQL). For PostgreSQL it is the
// postmaster's own time, the time of its children that ended (connections
// closed, reaped by it) and of those still running (backends, the
// walsender, the checkpointer). The benchmarks print the difference over
// a timed run beside decant's own CPU: on 2 cores shared by every server,
// the sum says whether a run was bounded by the machine's CPU.
type serverCPU map[string]float64

func readServerCPU() serverCPU {
	out := serverCPU{}
	for name, pid := range serverPids() {
		own, children, ok := procCPU(pid)
		if !ok {
			continue
		}
		t := own
		if name == "pg" {
			t += children
			for _, c := range procChildren(pid) {
				if o, _, ok := procCPU(c); ok {
					t += o
				}
			}
		}
		out[name] = t
	}
	return out
}

// serverPids maps each test server's name (es, kafka, opensearch, pg) to
// the pid e2e/infra wrote for it.
func serverPids() map[string]int {
	dir := os.Getenv("DECANT_INFRA_DIR")
	if dir == "" {
		dir = "/tmp/decant-infra"
	}
	out := map[string]int{}
	files, _ := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			continue
		}
		out[strings.TrimSuffix(filepath.Base(f), ".pid")] = pid
	}
	return out
}

// readJITCPU is the CPU time, in seconds, the JIT compilers of each test
// server's JVM have used: its threads named "C1 CompilerThread…" and "C2
// CompilerThread…" (HotSpot's), read per thread from /proc. A JVM compiles
// the code paths a workload takes as it first runs them, on the same cores;
// what its compilers spend inside a timed run is warm-up, not the work.
// HotSpot stops extra compiler threads when they idle, and a stopped
// thread's time leaves the sum: a difference of two readings is a lower
// bound of what the compilers spent between them.
func readJITCPU() serverCPU {
	out := serverCPU{}
	for name, pid := range serverPids() {
		if name == "pg" {
			continue
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		var t float64
		for _, task := range tasks {
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/comm", pid, task.Name()))
			if err != nil || !isJITThread(string(comm)) {
				continue
			}
			if own, _, ok := statCPU(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name())); ok {
				t += own
			}
		}
		out[name] = t
	}
	return out
}

// isJITThread says whether comm (a thread's name as /proc shows it, cut to
// 15 bytes) is one of HotSpot's compiler threads.
func isJITThread(comm string) bool {
	return strings.HasPrefix(comm, "C1 CompilerThre") || strings.HasPrefix(comm, "C2 CompilerThre")
}

// procCPU reads utime+stime and cutime+cstime of pid, in seconds.
func procCPU(pid int) (own, children float64, ok bool) {
	return statCPU(fmt.Sprintf("/proc/%d/stat", pid))
}

// ownCPU is this process's CPU so far, in seconds (0 when unreadable).
func ownCPU() float64 {
	own, _, _ := procCPU(os.Getpid())
	return own
}

// statCPU reads utime+stime and cutime+cstime, in seconds, from a stat
// file of /proc (a process's or one thread's).
func statCPU(path string) (own, children float64, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	// Fields after the command name (in parentheses): state is the
	// first, utime the 12th, stime the 13th, cutime and cstime the 14th
	// and 15th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 15 {
		return 0, 0, false
	}
	var v [4]float64
	for i := range v {
		v[i], _ = strconv.ParseFloat(f[11+i], 64)
	}
	return (v[0] + v[1]) / 100, (v[2] + v[3]) / 100, true
}

// procChildren lists the pids whose parent is pid.
func procChildren(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 2 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}

// since is the CPU each server used after s0, printed as
// "es:1.2,kafka:0.4,pg:3.1" (seconds; one token of a BENCH line) with their sum.
func (s serverCPU) since(s0 serverCPU) (string, float64) {
	var names []string
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	var sum float64
	for _, n := range names {
		d := s[n] - s0[n]
		if d < 0.05 {
			continue // idle (OpenSearch in an Elasticsearch run)
		}
		sum += d
		parts = append(parts, fmt.Sprintf("%s:%.1f", n, d))
	}
	return strings.Join(parts, ","), sum
}

// cpuBusy is the share of the machine's cores that cpuSeconds of CPU kept
// busy over took.
func cpuBusy(cpuSeconds float64, took time.Duration) float64 {
	return cpuSeconds / (float64(runtime.NumCPU()) * took.Seconds())
}

// atFullCPU is the ratio a run that used cpuSeconds of CPU (every server's
// and decant's) would reach against a ceiling of ceiling with every core
// busy all the time: when the measured ratio is close to it, only less
// CPU, not better overlap, can raise it.
func atFullCPU(ceiling time.Duration, cpuSeconds float64) float64 {
	return ceiling.Seconds() / (cpuSeconds / float64(runtime.NumCPU()))
}
