package binary

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/decant-cdc/decant/internal/testenv"
)

// ScreenshotEnv names a directory into which TestPipelinePage copies its
// screenshots (they are always in the test's artifact directory: go test
// -artifacts keeps it).
const ScreenshotEnv = "DECANT_TEST_SCREENSHOT_DIR"

// TestPipelinePage drives headless Chromium against the pipeline page.
// `decant run` runs the stages; the page is read from a second process,
// `decant serve`, which runs no stage: a SIGSTOPped process cannot answer
// HTTP, and the page reads the positions from PostgreSQL and Kafka, not
// from the stages, so another process shows the whole pipeline. The test
// checks that the page draws every stage, that the slot's lag appears
// while decant run is stopped and rows are written, and that it drains
// once decant run continues; it saves a screenshot of each state.
func TestPipelinePage(t *testing.T) {
	chrome := chromium(t)
	p := newPipeline(t)
	runAddr, pageAddr := testenv.FreePort(t), testenv.FreePort(t)
	run := p.Start("run", []string{"DECANT_HTTP_LISTEN=" + runAddr}, "run")
	t.Cleanup(func() { run.Signal(syscall.SIGCONT) }) // so that a failed test can stop it
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 200) g`)
	p.WaitConverged(2 * time.Minute)
	serve := p.Start("serve", []string{"DECANT_HTTP_LISTEN=" + pageAddr}, "serve")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1400, 860))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	// decant run's own page shows its stages, and that it runs them.
	open(t, browser, "http://"+runAddr+"/")
	waitPage(t, browser, "decant run's page lists its stages", func(s pageState) bool {
		return s.has("slot", "raw", "map", "refs", "build", "agg") && strings.Contains(s.Status, "runs build, map, stream")
	})
	testenv.WaitFor(t, "decant serve's HTTP port", time.Minute, func() (bool, error) {
		code, _, err := testenv.Get("http://" + pageAddr + "/healthz")
		return code == 200, err
	})
	open(t, browser, "http://"+pageAddr+"/")
	caughtUp := func(s pageState) bool {
		return s.lag("slot") >= 0 && s.lag("slot") < 64<<10 && s.lag("map") == 0 && s.lag("build") == 0 && s.Docs == "200"
	}
	waitPage(t, browser, "every stage caught up, 200 documents", caughtUp)

	run.Signal(syscall.SIGSTOP)
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'bulk', 2, repeat('x', 300) FROM generate_series(1001, 5000) g`)
	paused := waitPage(t, browser, "the slot's lag while decant run is stopped", func(s pageState) bool {
		return s.lag("slot") > 1<<20 && strings.Contains(s.LagText, "MiB")
	})
	t.Logf("paused: slot lag %s", paused.LagText)
	screenshot(t, browser, "pipeline-page-paused.png")

	run.Signal(syscall.SIGCONT)
	waitPage(t, browser, "the lag drained after decant run continued", func(s pageState) bool {
		return s.lag("slot") >= 0 && s.lag("slot") < 64<<10 && s.lag("map") == 0 && s.lag("build") == 0
	})
	p.WaitConverged(2 * time.Minute)
	final := waitPage(t, browser, "4,200 documents and the lag in the slot's chart", func(s pageState) bool {
		return s.Docs == "4,200" && s.SlotPaths >= 2
	})
	if final.Errors != "none" {
		t.Errorf("last errors: %q, want none", final.Errors)
	}
	time.Sleep(3 * time.Second) // a few samples after the drain, for the charts
	screenshot(t, browser, "pipeline-page.png")
	if code := run.Term(time.Minute); code != 0 {
		t.Errorf("decant run: exit %d", code)
	}
	if code := serve.Term(time.Minute); code != 0 {
		t.Errorf("decant serve: exit %d", code)
	}
}

// chromium finds the browser (DECANT_CHROMIUM, else chromium on PATH):
// missing, the test fails under CI=true and is skipped elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	testenv.Integration(t)
	for _, name := range []string{os.Getenv("DECANT_CHROMIUM"), "chromium", "chromium-browser"} {
		if name == "" {
			continue
		}
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	msg := "chromium is not installed (bash e2e/infra/chromium.sh up installs it; make test does)"
	if testenv.InCI() {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// pageState is what the page shows: each stage's data-lag ("" for a
// topic), the slot's lag as written, the aggregate's documents, the
// header, the errors list and how many paths the slot's chart has.
type pageState struct {
	Stages    map[string]string `json:"stages"`
	LagText   string            `json:"lagText"`
	Docs      string            `json:"docs"`
	Status    string            `json:"status"`
	Errors    string            `json:"errors"`
	SlotPaths int               `json:"slotPaths"`
}

func (s pageState) has(ids ...string) bool {
	for _, id := range ids {
		if _, ok := s.Stages[id]; !ok {
			return false
		}
	}
	return true
}

// lag is a stage's lag, -1 when not shown.
func (s pageState) lag(id string) int64 {
	var n int64 = -1
	if v, ok := s.Stages[id]; ok && v != "" {
		fmt.Sscan(v, &n)
	}
	return n
}

const readPage = `(() => ({
  stages: Object.fromEntries([...document.querySelectorAll("[data-stage]")].map(e => [e.dataset.stage, e.dataset.lag])),
  lagText: (document.querySelector('[data-stage="slot"] .lag') || {}).textContent || "",
  docs: (document.querySelector("#aggregates tbody tr td:nth-child(2)") || {}).textContent || "",
  status: document.getElementById("status").textContent,
  errors: document.getElementById("errors").textContent,
  slotPaths: document.querySelectorAll('[data-stage="slot"] svg path').length,
}))()`

func open(t *testing.T, browser context.Context, url string) {
	t.Helper()
	if err := chromedp.Do(browser, chromedp.Navigate(url)); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
}

// waitPage reads the page every half second until cond holds (3 minutes
// at most) and returns what it showed.
func waitPage(t *testing.T, browser context.Context, what string, cond func(pageState) bool) pageState {
	t.Helper()
	var s pageState
	var err error
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if s, err = chromedp.Run(browser, chromedp.Evaluate[pageState](readPage)); err == nil && cond(s) {
			return s
		}
		time.Sleep(500 * time.Millisecond)
	}
	screenshot(t, browser, "pipeline-page-failed.png")
	t.Fatalf("waiting for %s: the page shows %+v (err %v)", what, s, err)
	return s
}

// screenshot saves the viewport as name in the test's artifact directory
// and, when ScreenshotEnv is set, in that directory.
func screenshot(t *testing.T, browser context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	dirs := []string{t.ArtifactDir()}
	if d := os.Getenv(ScreenshotEnv); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		path := filepath.Join(d, name)
		err := os.MkdirAll(d, 0o755)
		if err == nil {
			err = os.WriteFile(path, png, 0o644)
		}
		if err != nil {
			t.Errorf("screenshot %s: %v", path, err)
		} else {
			t.Logf("screenshot: %s", path)
		}
	}
}
