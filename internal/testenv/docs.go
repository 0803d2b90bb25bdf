package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
)

// FreePort returns a free 127.0.0.1 address, host:port.
func FreePort(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Get fetches url and returns the status code and body.
func Get(url string) (int, string, error) {
	res, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), nil
}

// Canonical re-encodes JSON with sorted keys, so that equal documents
// compare equal as strings.
func Canonical(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "invalid JSON: " + string(b)
	}
	c, _ := json.Marshal(v)
	return string(c)
}

// DecodeExact decodes one JSON value keeping numbers as their literal
// text, so that comparisons are exact (1.50 ≠ 1.5, no float rounding of
// big integers); invalid JSON or trailing data fails the test.
func DecodeExact(tb testing.TB, b []byte) any {
	tb.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		tb.Fatalf("invalid JSON %q: %v", b, err)
	}
	if d.More() {
		tb.Fatalf("trailing data after JSON value in %q", b)
	}
	return v
}

// ESRequest sends a request with body (JSON-encoded when not nil) to
// Elasticsearch and decodes the answer into out (when not nil). It returns
// the status code; an answer that is not 2xx is an error.
func ESRequest(ctx context.Context, method, url string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("elasticsearch %s %s: %w", method, url, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, err
	}
	if res.StatusCode/100 != 2 {
		return res.StatusCode, fmt.Errorf("elasticsearch %s %s: %s: %.300s", method, url, res.Status, b)
	}
	if out != nil {
		return res.StatusCode, json.Unmarshal(b, out)
	}
	return res.StatusCode, nil
}

// Hit is one document read by ESHits.
type Hit struct {
	ID      string          `json:"_id"`
	Version int64           `json:"_version"`
	Source  json.RawMessage `json:"_source"` // nil unless asked for
	Sort    json.RawMessage `json:"sort"`
}

// ESHits reads every document of an index or alias after a refresh, in
// pages of 5,000 (search_after), with its version and, when source is
// set, its _source.
func ESHits(ctx context.Context, esURL, alias string, source bool) ([]Hit, error) {
	if _, err := ESRequest(ctx, http.MethodPost, esURL+"/"+alias+"/_refresh", nil, nil); err != nil {
		return nil, err
	}
	var out []Hit
	var after json.RawMessage
	for {
		body := map[string]any{"size": 5000, "sort": []string{"_doc"}, "version": true, "_source": source}
		if after != nil {
			body["search_after"] = after
		}
		var sr struct {
			Hits struct {
				Hits []Hit `json:"hits"`
			} `json:"hits"`
		}
		if _, err := ESRequest(ctx, http.MethodPost, esURL+"/"+alias+"/_search", body, &sr); err != nil {
			return nil, fmt.Errorf("search %s: %w", alias, err)
		}
		if len(sr.Hits.Hits) == 0 {
			return out, nil
		}
		out = append(out, sr.Hits.Hits...)
		after = sr.Hits.Hits[len(sr.Hits.Hits)-1].Sort
	}
}

// ESDocs reads every document of an index or alias (after a refresh):
// _id → canonical _source.
func ESDocs(esURL, alias string) (map[string]string, error) {
	hits, err := ESHits(context.Background(), esURL, alias, true)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, h := range hits {
		out[h.ID] = Canonical(h.Source)
	}
	return out, nil
}

// Oracle runs sql, which computes the expected documents from the tables
// independently of decant's generated SQL, as rows (id text, document
// json): id → canonical document.
func Oracle(tb testing.TB, pool *pgxpool.Pool, sql string) map[string]string {
	tb.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		tb.Fatalf("oracle: %v", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id string
		var doc []byte
		if err := rows.Scan(&id, &doc); err != nil {
			tb.Fatal(err)
		}
		out[id] = Canonical(doc)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// Mismatches lists, sorted, the differences between the documents that
// should be (want) and those that are (got), both id → canonical JSON.
func Mismatches(want, got map[string]string) []string {
	var out []string
	for id, w := range want {
		if g, ok := got[id]; !ok {
			out = append(out, "missing "+id)
		} else if g != w {
			out = append(out, fmt.Sprintf("%s: es %s, db %s", id, g, w))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			out = append(out, "extra "+id)
		}
	}
	slices.Sort(out)
	return out
}

// Index is one Elasticsearch alias checked against the oracle query that
// computes its documents from the database.
type Index struct {
	ESURL, Alias string
	Pool         *pgxpool.Pool
	OracleSQL    string // see Oracle
}

// Mismatches compares the alias with the oracle now.
func (x Index) Mismatches(tb testing.TB) []string {
	tb.Helper()
	got, err := ESDocs(x.ESURL, x.Alias)
	if err != nil {
		return []string{err.Error()}
	}
	return Mismatches(Oracle(tb, x.Pool, x.OracleSQL), got)
}

// WaitConverged waits until the alias equals the oracle, and fails naming
// the mismatches (the first five) after timeout.
func (x Index) WaitConverged(tb testing.TB, timeout time.Duration) {
	tb.Helper()
	WaitFor(tb, "Elasticsearch to equal the database", timeout, func() (bool, error) {
		m := x.Mismatches(tb)
		if len(m) > 5 {
			return false, fmt.Errorf("%d mismatches, e.g. %v", len(m), m[:5])
		}
		return len(m) == 0, fmt.Errorf("mismatches: %v", m)
	})
}

// GroupLag is the number of records of topics that group has not
// committed: per partition, the end offset less the committed offset (or
// the start offset when the group has committed none). A partition whose
// offset cannot be listed is an error.
func GroupLag(ctx context.Context, adm *kadm.Client, group string, topics ...string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return 0, err
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, err
	}
	var lag int64
	for _, topic := range slices.Sorted(maps.Keys(ends)) {
		for _, o := range ends[topic] {
			if o.Err != nil {
				return 0, fmt.Errorf("end offset of %s/%d: %w", topic, o.Partition, o.Err)
			}
			at := int64(0)
			if s, ok := starts.Lookup(topic, o.Partition); ok {
				at = s.Offset
			}
			if c, ok := committed.Lookup(topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
				at = c.At
			}
			lag += max(0, o.Offset-at)
		}
	}
	return lag, nil
}
