package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process whose output goes to a log file: a decant
// binary, a peer tool, or the test binary itself re-run as one stage (see
// StartChild).
type Proc struct {
	Name string    // for messages, e.g. "run-2" or "map#3"
	Cmd  *exec.Cmd // started
	Log  string    // path of its stdout and stderr
	done chan struct{}
	err  error // Wait's result, once done is closed
}

// Launch starts cmd with its output appended to logPath and kills it at
// cleanup (logging its output when the test failed). It returns an error
// instead of failing, so it may be called from any goroutine.
func Launch(tb testing.TB, name, logPath string, cmd *exec.Cmd) (*Proc, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	tb.Cleanup(func() {
		p.Kill()
		if tb.Failed() {
			tb.Logf("%s", p.Tail(200))
			keepLog(tb, p)
		}
	})
	return p, nil
}

// Start is Launch failing the test on error.
func Start(tb testing.TB, name, logPath string, cmd *exec.Cmd) *Proc {
	tb.Helper()
	p, err := Launch(tb, name, logPath, cmd)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// ChildEnv is the variable through which StartChild hands a child its
// spec: a TestMain that finds it set runs the child instead of the tests.
const ChildEnv = "DECANT_TEST_CHILD"

// StartChild re-runs the test binary as a child process with ChildEnv set
// to spec (so that tests can kill -9 a stage that runs in-process code).
func StartChild(tb testing.TB, name, logPath, spec string) (*Proc, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"="+spec)
	return Launch(tb, name, logPath, cmd)
}

// RunChild is the child side of StartChild, called first in TestMain.
// When ChildEnv is set it decodes its spec into an S, runs run with a
// context that ends on SIGTERM or an interrupt and an info-level logger
// on stderr, and exits the process with the status run returns (2 when
// the spec does not decode). When ChildEnv is not set it returns.
func RunChild[S any](run func(ctx context.Context, spec S, log *slog.Logger) int) {
	raw := os.Getenv(ChildEnv)
	if raw == "" {
		return
	}
	var spec S
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, ChildEnv+":", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, spec, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	stop()
	os.Exit(code)
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is Wait's result; valid once Exited.
func (p *Proc) Err() error { return p.err }

// Signal sends sig (an error when the process is gone is ignored).
func (p *Proc) Signal(sig syscall.Signal) { _ = p.Cmd.Process.Signal(sig) }

// Kill sends SIGKILL and waits until the process is gone. Idempotent.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// ExitCode waits up to timeout for the process to exit by itself and
// returns its exit code, or -1 if it is still running.
func (p *Proc) ExitCode(timeout time.Duration) int {
	select {
	case <-p.done:
		return p.Cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		return -1
	}
}

// Term sends SIGTERM and waits up to timeout for the exit; then SIGKILL.
// It returns the exit code, or -1 when the process had to be killed.
func (p *Proc) Term(timeout time.Duration) int {
	if p.Exited() {
		return p.Cmd.ProcessState.ExitCode()
	}
	p.Signal(syscall.SIGTERM)
	if code := p.ExitCode(timeout); code != -1 || p.Exited() {
		return code
	}
	p.Kill()
	return -1
}

// Output is everything the process has written so far.
func (p *Proc) Output() string {
	b, _ := os.ReadFile(p.Log)
	return string(b)
}

// Tail is the last n lines of the process's output, headed by its name,
// for failure messages.
func (p *Proc) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	return fmt.Sprintf("last lines of %s (%s):\n%s", p.Name, p.Log, strings.Join(lines[max(0, len(lines)-n):], "\n"))
}

// PeakRSS is the process's peak resident set size (VmHWM) in bytes.
func (p *Proc) PeakRSS() (int64, error) { return PeakRSS(p.Pid()) }

// PeakRSS is the peak resident set size (VmHWM) of process pid in bytes.
func PeakRSS(pid int) (int64, error) { return procStatus(pid, "VmHWM") }

// RSS reads a process's resident set size now (VmRSS) in bytes.
func RSS(pid int) (int64, error) { return procStatus(pid, "VmRSS") }

// procStatus reads a "<field>: <n> kB" line of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err != nil {
				return 0, fmt.Errorf("%s %q: %w", field, rest, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// KeepEnv names a directory into which the logs of a failed test's
// processes are copied whole (the test's own directory is removed).
const KeepEnv = "DECANT_TEST_KEEP_LOGS"

func keepLog(tb testing.TB, p *Proc) {
	dir := os.Getenv(KeepEnv)
	if dir == "" {
		return
	}
	b, err := os.ReadFile(p.Log)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		name := strings.NewReplacer("/", "_", " ", "_").Replace(tb.Name() + "." + p.Name + ".log")
		err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	if err != nil {
		tb.Logf("keeping the log of %s: %v", p.Name, err)
	}
}
