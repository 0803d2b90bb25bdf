package binary

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestGrafanaDashboardQueriesExistingMetrics (issue 19): every metric the
// Grafana dashboard in docs/grafana queries is on the /metrics of a
// `decant run` that has built documents — so a renamed or removed metric
// breaks this test, not an operator's dashboard.
func TestGrafanaDashboardQueriesExistingMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../docs/grafana/decant.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("docs/grafana/decant.json: %v", err)
	}
	queried := map[string]string{} // metric → panel
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range regexp.MustCompile(`decant_[a-z_]+`).FindAllString(tg.Expr, -1) {
				queried[m] = p.Title
			}
		}
	}
	if len(dash.Panels) < 8 || len(queried) < 15 {
		t.Fatalf("the dashboard has %d panels querying %d metrics: too few to be it", len(dash.Panels), len(queried))
	}

	p := newPipeline(t)
	addr := testenv.FreePort(t)
	p.Start("run", []string{"DECANT_HTTP_LISTEN=" + addr}, "run")
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 + g % 2 FROM generate_series(1, 50) g`)
	p.WaitConverged(90 * time.Second)
	// Changes streamed after the snapshot, whatever the snapshot held.
	p.PG.Exec(t, `UPDATE items SET name = name || ' again' WHERE id <= 10`)
	p.WaitConverged(90 * time.Second)
	var families map[string]bool
	testenv.WaitFor(t, "/metrics with every metric the dashboard queries", 60*time.Second, func() (bool, error) {
		code, body, err := testenv.Get("http://" + addr + "/metrics")
		if err != nil || code != 200 {
			return false, fmt.Errorf("%d %v", code, err)
		}
		families = map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^# TYPE (decant_[a-z_]+) (\w+)$`).FindAllStringSubmatch(body, -1) {
			families[m[1]] = true
			if m[2] == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					families[m[1]+s] = true
				}
			}
		}
		var missing []string
		for m := range queried {
			if !families[m] {
				missing = append(missing, m)
			}
		}
		return len(missing) == 0, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	})
}
