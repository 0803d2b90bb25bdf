package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/internal/testenv"
)

// esNodeStats is what one Elasticsearch node did so far, from its node
// stats: the benchmarks print the difference over a timed run, so that a
// run whose Elasticsearch CPU differs from its ceiling's says where
// (indexing, refreshes, merges, garbage collection).
type esNodeStats struct {
	indexOps, indexMillis     int64
	throttleMillis            int64 // indexing throttled: segment writing could not keep up
	externalRefreshes         int64 // refreshes asked for (the rest are Elasticsearch's own, such as writing the indexing buffer)
	deleteOps                 int64
	refreshes, refreshMillis  int64
	merges, mergeMillis       int64
	flushes                   int64
	youngGCMillis, oldGCMills int64
	searches                  int64
	bulkRequests              int64
}

// readESStats reads the node stats of the server es names; the zero value
// when they cannot be read (the figures are informative only).
func readESStats(es *testenv.ESEnv) esNodeStats {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := esapi.NodesStatsRequest{NodeID: []string{"_local"}, Metric: []string{"indices", "jvm", "thread_pool"}}.Do(ctx, es.Search)
	if err != nil {
		return esNodeStats{}
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.IsError() {
		return esNodeStats{}
	}
	var v struct {
		Nodes map[string]struct {
			Indices struct {
				Indexing struct {
					IndexTotal  int64 `json:"index_total"`
					IndexMillis int64 `json:"index_time_in_millis"`
					DeleteTotal int64 `json:"delete_total"`
					Throttle    int64 `json:"throttle_time_in_millis"`
				} `json:"indexing"`
				Refresh struct {
					Total    int64 `json:"total"`
					Millis   int64 `json:"total_time_in_millis"`
					External int64 `json:"external_total"`
				} `json:"refresh"`
				Merges struct {
					Total  int64 `json:"total"`
					Millis int64 `json:"total_time_in_millis"`
				} `json:"merges"`
				Flush struct {
					Total int64 `json:"total"`
				} `json:"flush"`
				Search struct {
					QueryTotal int64 `json:"query_total"`
				} `json:"search"`
			} `json:"indices"`
			JVM struct {
				GC struct {
					Collectors map[string]struct {
						Millis int64 `json:"collection_time_in_millis"`
					} `json:"collectors"`
				} `json:"gc"`
			} `json:"jvm"`
			ThreadPool map[string]struct {
				Completed int64 `json:"completed"`
			} `json:"thread_pool"`
		} `json:"nodes"`
	}
	if json.Unmarshal(body, &v) != nil {
		return esNodeStats{}
	}
	var s esNodeStats
	for _, n := range v.Nodes {
		s.indexOps += n.Indices.Indexing.IndexTotal
		s.indexMillis += n.Indices.Indexing.IndexMillis
		s.deleteOps += n.Indices.Indexing.DeleteTotal
		s.refreshes += n.Indices.Refresh.Total
		s.externalRefreshes += n.Indices.Refresh.External
		s.throttleMillis += n.Indices.Indexing.Throttle
		s.refreshMillis += n.Indices.Refresh.Millis
		s.merges += n.Indices.Merges.Total
		s.mergeMillis += n.Indices.Merges.Millis
		s.flushes += n.Indices.Flush.Total
		s.searches += n.Indices.Search.QueryTotal
		s.youngGCMillis += n.JVM.GC.Collectors["young"].Millis
		s.oldGCMills += n.JVM.GC.Collectors["old"].Millis
		s.bulkRequests += n.ThreadPool["write"].Completed
	}
	return s
}

// since is what the node did between s0 and s, as one figure for a
// BENCH line: es_work=index:<ops>/<s>,refresh:<n>/<s>,merge:<n>/<s>,…
func (s esNodeStats) since(s0 esNodeStats) string {
	sec := func(ms int64) string { return fmt.Sprintf("%.1fs", float64(ms)/1000) }
	return fmt.Sprintf("index:%d/%s,throttled:%s,delete:%d,refresh:%d/%s,external_refresh:%d,merge:%d/%s,flush:%d,gc:%s/%s,write_tasks:%d,searches:%d",
		s.indexOps-s0.indexOps, sec(s.indexMillis-s0.indexMillis), sec(s.throttleMillis-s0.throttleMillis), s.deleteOps-s0.deleteOps,
		s.refreshes-s0.refreshes, sec(s.refreshMillis-s0.refreshMillis), s.externalRefreshes-s0.externalRefreshes,
		s.merges-s0.merges, sec(s.mergeMillis-s0.mergeMillis), s.flushes-s0.flushes,
		sec(s.youngGCMillis-s0.youngGCMillis), sec(s.oldGCMills-s0.oldGCMills),
		s.bulkRequests-s0.bulkRequests, s.searches-s0.searches)
}
