package binary

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestPipelineLagInSeconds (issue 19): with the stream stage running and
// no map or build stage, /v1/pipeline (served by `decant serve`) shows
// the map stage behind in records and in seconds: the age of the oldest
// raw record it has not committed.
func TestPipelineLagInSeconds(t *testing.T) {
	p := newPipeline(t)
	addr := testenv.FreePort(t)
	p.Start("stream", []string{"DECANT_HTTP_LISTEN=" + testenv.FreePort(t)}, "stream")
	p.Start("serve", []string{"DECANT_HTTP_LISTEN=" + addr}, "serve")
	p.PG.Exec(t, `INSERT INTO items SELECT g, 'item ' || g, 1 FROM generate_series(1, 50) g`)
	start := time.Now()
	var last string
	testenv.WaitFor(t, "the map stage behind in seconds on /v1/pipeline", 90*time.Second, func() (bool, error) {
		code, body, err := testenv.Get("http://" + addr + "/v1/pipeline")
		if err != nil || code != 200 {
			return false, fmt.Errorf("%d %v", code, err)
		}
		last = body
		var v struct {
			Stages []struct {
				ID         string
				Lag        *int64
				LagSeconds *float64 `json:"lag_seconds"`
			}
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			return false, err
		}
		for _, s := range v.Stages {
			if s.ID == "map" && s.Lag != nil && *s.Lag >= 50 && s.LagSeconds != nil && *s.LagSeconds > 1 {
				if max := time.Since(start).Seconds() + 1; *s.LagSeconds > max {
					t.Fatalf("map lag %.1f s, more than the %.1f s since the rows were written", *s.LagSeconds, max)
				}
				return true, nil
			}
		}
		return false, fmt.Errorf("not yet: %.300s", last)
	})
}
