package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// fleet supervises decant stage processes like an init system with
// Restart=always: a process that exits is started again. Exits the test
// did not cause are counted and kept for the report.
type fleet struct {
	bin, config, logDir string

	mu        sync.Mutex
	procs     map[string]*supervised
	selfExits []string // "name: exit status …" of exits the test did not cause
	termExits []string // runs that did not exit 0 after a SIGTERM
	wg        sync.WaitGroup
}

// supervised is one named process slot (e.g. build-a) and its current run.
type supervised struct {
	name, stage string
	cmd         *exec.Cmd
	gen         int
	expected    bool          // the next exit was caused by the test
	termed      bool          // … by a SIGTERM, so it must exit 0
	delay       time.Duration // before the next restart
	stopped     bool          // no more restarts
	exited      chan struct{} // closed when the current run exits
}

func newFleet(bin, config, logDir string) *fleet {
	return &fleet{bin: bin, config: config, logDir: logDir, procs: map[string]*supervised{}}
}

// start launches `decant <stage>` under name and keeps it running until stop.
func (f *fleet) start(name, stage string) error {
	p := &supervised{name: name, stage: stage}
	f.mu.Lock()
	f.procs[name] = p
	err := f.launch(p)
	f.mu.Unlock()
	if err != nil {
		return err
	}
	f.wg.Add(1)
	go f.supervise(p)
	return nil
}

// launch starts one run of p; f.mu is held.
func (f *fleet) launch(p *supervised) error {
	p.gen++
	logf, err := os.OpenFile(filepath.Join(f.logDir, p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== %s run %d started %s\n", p.name, p.gen, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(f.bin, p.stage, "--config", f.config)
	cmd.Env = testenv.DecantEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.expected, p.termed, p.delay = cmd, false, false, 0
	p.exited = make(chan struct{})
	exited := p.exited
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(logf, "=== %s run exited %s: %v\n", p.name, time.Now().Format(time.RFC3339Nano), err)
		logf.Close()
		close(exited)
	}()
	return nil
}

func (f *fleet) supervise(p *supervised) {
	defer f.wg.Done()
	for {
		f.mu.Lock()
		exited := p.exited
		f.mu.Unlock()
		<-exited
		f.mu.Lock()
		if p.stopped {
			f.mu.Unlock()
			return
		}
		delay := p.delay
		if p.termed && p.cmd.ProcessState.ExitCode() != 0 {
			f.termExits = append(f.termExits, fmt.Sprintf("%s run %d: %v after SIGTERM", p.name, p.gen, p.cmd.ProcessState))
		}
		if !p.expected {
			f.selfExits = append(f.selfExits, fmt.Sprintf("%s run %d: %v", p.name, p.gen, p.cmd.ProcessState))
			delay = time.Second
		}
		f.mu.Unlock()
		time.Sleep(delay)
		f.mu.Lock()
		if p.stopped {
			f.mu.Unlock()
			return
		}
		for f.launch(p) != nil {
			f.mu.Unlock()
			time.Sleep(time.Second)
			f.mu.Lock()
		}
		f.mu.Unlock()
	}
}

// signal sends sig to the current run of name; it is restarted after delay.
func (f *fleet) signal(name string, sig syscall.Signal, delay time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.procs[name]
	p.expected, p.termed, p.delay = true, sig == syscall.SIGTERM, delay
	_ = p.cmd.Process.Signal(sig)
}

// pause freezes the current run of name (SIGSTOP) for d, then lets it go
// on (SIGCONT): a process the OS, a hypervisor or a long GC froze, whose
// group session may expire meanwhile.
func (f *fleet) pause(ctx context.Context, name string, d time.Duration) {
	f.mu.Lock()
	proc := f.procs[name].cmd.Process
	f.mu.Unlock()
	_ = proc.Signal(syscall.SIGSTOP)
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	_ = proc.Signal(syscall.SIGCONT)
}

// stop ends name for good: SIGTERM, then SIGKILL after 30s. It waits for
// the exit and returns the exit code (-1 when killed).
func (f *fleet) stop(name string) int {
	f.mu.Lock()
	p := f.procs[name]
	p.stopped, p.expected = true, true
	cmd, exited := p.cmd, p.exited
	f.mu.Unlock()
	select {
	case <-exited: // between two runs
		return 0
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			f.mu.Lock()
			f.termExits = append(f.termExits, fmt.Sprintf("%s run %d: %v after SIGTERM", p.name, p.gen, cmd.ProcessState))
			f.mu.Unlock()
		}
		return cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		f.mu.Lock()
		f.termExits = append(f.termExits, fmt.Sprintf("%s run %d: still running 30s after SIGTERM; killed", p.name, p.gen))
		f.mu.Unlock()
		return -1
	}
}

// stopAll kills every process (cleanup) and waits for the supervisors.
func (f *fleet) stopAll() {
	f.mu.Lock()
	for _, p := range f.procs {
		p.stopped, p.expected = true, true
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// exits returns the exits the test did not cause, and the runs that did
// not exit 0 after a SIGTERM.
func (f *fleet) exits() (self, term []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.selfExits...), append([]string(nil), f.termExits...)
}

// logTail returns the last n lines of name's log.
func (f *fleet) logTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(f.logDir, name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
