package indexer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"

	"github.com/decant-cdc/decant/internal/ctxtime"
	"github.com/decant-cdc/decant/mappings"
)

// IndexSpec is what an aggregate's Elasticsearch index must look like.
type IndexSpec struct {
	// Aggregate names the aggregate, for messages.
	Aggregate string
	// Alias is the name searches and writes use (mappings Aggregate.Index).
	Alias string
	// Settings and Mappings are the index body (Aggregate.IndexSettings and
	// Aggregate.IndexMapping).
	Settings map[string]any
	Mappings map[string]any
	// DocumentSQL is the aggregate's filters and computed fields
	// (Aggregate.DocumentSQL): part of the hash, not of the index body.
	DocumentSQL []string
	// ZeroReplicas adds number_of_replicas: 0 when Settings leave replicas
	// out, so that a single-node cluster is green. Default: false (the
	// cluster default, 1 replica).
	ZeroReplicas bool
}

// SpecFor returns the index spec of a bound aggregate.
func SpecFor(a *mappings.Aggregate, zeroReplicas bool) IndexSpec {
	return IndexSpec{Aggregate: a.Name, Alias: a.Index, Settings: a.IndexSettings(), Mappings: a.IndexMapping(), DocumentSQL: a.DocumentSQL(), ZeroReplicas: zeroReplicas}
}

// Hash returns 8 hex digits of the SHA-256 of the settings and mappings,
// and of the filters and computed fields when there are any (so the
// hash of an aggregate without them is what it was before they counted).
// The replica count is left out: it can change on a live index.
func (s IndexSpec) Hash() string {
	h := map[string]any{"settings": withoutReplicas(s.Settings), "mappings": s.Mappings}
	if len(s.DocumentSQL) > 0 {
		h["documents"] = s.DocumentSQL
	}
	b, _ := json.Marshal(h) // map keys sorted: deterministic
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:4])
}

// IndexName returns the concrete index behind the alias: <alias>_<hash>.
func (s IndexSpec) IndexName() string { return s.Alias + "_" + s.Hash() }

// NextAlias returns the alias that marks a reindex in progress:
// <alias>-next, pointing at the new concrete index. Sinks that see it write
// to both indexes.
func (s IndexSpec) NextAlias() string { return nextAlias(s.Alias) }

func nextAlias(alias string) string { return alias + "-next" }

func withoutReplicas(settings map[string]any) map[string]any {
	out := make(map[string]any, len(settings))
	for k, v := range settings {
		switch k {
		case "number_of_replicas", "index.number_of_replicas", "auto_expand_replicas", "index.auto_expand_replicas":
			continue
		case "index":
			if m, ok := v.(map[string]any); ok {
				v = withoutReplicas(m)
			}
		}
		out[k] = v
	}
	return out
}

func hasReplicas(settings map[string]any) bool {
	for _, k := range []string{"number_of_replicas", "index.number_of_replicas", "auto_expand_replicas", "index.auto_expand_replicas"} {
		if _, ok := settings[k]; ok {
			return true
		}
	}
	if m, ok := settings["index"].(map[string]any); ok {
		return hasReplicas(m)
	}
	return false
}

// body returns the create-index request body. The mapping's _meta records
// the aggregate and hash, so decant can tell its own indexes from an index
// Elasticsearch auto-created under the same name.
// When load, the index is created for a bulk load (see FinishLoad).
func (s IndexSpec) body(load bool) []byte {
	settings := make(map[string]any, len(s.Settings)+2)
	for k, v := range s.Settings {
		settings[k] = v
	}
	if s.ZeroReplicas && !hasReplicas(s.Settings) {
		settings["number_of_replicas"] = 0
	}
	if load {
		settings = loadSettings(settings)
	}
	mapping := make(map[string]any, len(s.Mappings)+1)
	for k, v := range s.Mappings {
		mapping[k] = v
	}
	meta := map[string]any{}
	if m, ok := s.Mappings["_meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	meta["decant_aggregate"] = s.Aggregate
	meta["decant_hash"] = s.Hash()
	if load {
		meta[loadingMeta] = true
	}
	mapping["_meta"] = meta
	b, _ := json.Marshal(map[string]any{"settings": settings, "mappings": mapping})
	return b
}

// MappingChangedError says the alias points at an index built from other
// settings or mappings than the current ones.
type MappingChangedError struct {
	Aggregate, Alias string
	Current, Want    string // concrete index names
}

func (e *MappingChangedError) Error() string {
	return fmt.Sprintf("aggregate %s: mapping changed: alias %s points at %s but the current mappings need %s: run `decant backfill %s --reindex`",
		e.Aggregate, e.Alias, e.Current, e.Want, e.Aggregate)
}

// current checks spec and returns its concrete index name and what the
// alias and the reindex marker <alias>-next point at now.
func (s IndexSpec) current(ctx context.Context, es Search) (want string, aliases map[string][]string, err error) {
	if err := s.check(); err != nil {
		return "", nil, err
	}
	aliases, err = getAliases(ctx, es, s.Alias, s.NextAlias())
	return s.IndexName(), aliases, err
}

// EnsureIndex makes sure the alias exists. When it is missing, it creates
// the concrete index <alias>_<hash> and points the alias at it. When the
// alias points at the index of the current spec, or a reindex towards it is
// in progress, it returns the index the alias points at. When the alias
// points at another index, it returns a *MappingChangedError and changes
// nothing: a mapping change is applied by a reindex, never silently.
func EnsureIndex(ctx context.Context, es Search, spec IndexSpec) (string, error) {
	return ensureIndex(ctx, es, spec, false)
}

// EnsureLoadIndex is EnsureIndex creating a missing index for a bulk load
// (the first start's initial load): refresh off and no replicas until
// FinishLoad. It also reports whether the index the alias points at is
// still being loaded (created so, by this call or by an earlier process
// that did not finish the load).
func EnsureLoadIndex(ctx context.Context, es Search, spec IndexSpec) (index string, loading bool, err error) {
	index, err = ensureIndex(ctx, es, spec, true)
	if err != nil {
		return index, false, err
	}
	loading, err = Loading(ctx, es, index)
	return index, loading, err
}

func ensureIndex(ctx context.Context, es Search, spec IndexSpec, load bool) (string, error) {
	want, al, err := spec.current(ctx, es)
	if err != nil {
		return "", err
	}
	cur := al[spec.Alias]
	switch {
	case len(cur) == 0:
		if err := createIndex(ctx, es, spec, load); err != nil {
			return "", err
		}
		err := updateAliases(ctx, es, fmt.Sprintf("create alias %s", spec.Alias),
			aliasAction{"add", want, spec.Alias})
		if err != nil {
			return "", fmt.Errorf("%w (if an index named %s exists and holds nothing you need, delete it: DELETE /%s)", err, spec.Alias, spec.Alias)
		}
		return want, nil
	case len(cur) > 1:
		return "", fmt.Errorf("aggregate %s: alias %s points at %d indexes (%s); decant writes through it and needs exactly one: remove the others with POST /_aliases",
			spec.Aggregate, spec.Alias, len(cur), strings.Join(cur, ", "))
	case cur[0] == want:
		return want, nil
	case len(al[spec.NextAlias()]) == 1 && al[spec.NextAlias()][0] == want:
		return cur[0], nil // reindex towards the current spec in progress
	}
	return cur[0], &MappingChangedError{Aggregate: spec.Aggregate, Alias: spec.Alias, Current: cur[0], Want: want}
}

func (s IndexSpec) check() error {
	if s.Alias == "" {
		return fmt.Errorf("aggregate %s: index spec has no alias", s.Aggregate)
	}
	if s.Mappings == nil {
		return fmt.Errorf("aggregate %s: index spec has no mappings", s.Aggregate)
	}
	return nil
}

// ReindexOptions tune StartReindex, SwapAlias, AbortReindex and Reindex.
type ReindexOptions struct {
	// Settle is how long StartReindex waits after marking the reindex, so
	// that every running ESSink has re-read the marker and writes to both
	// indexes before the backfill starts; SwapAlias and AbortReindex wait
	// as long before deleting an index, so no search or write still uses
	// it. It must exceed the sinks' RecheckInterval. Default: 2 ×
	// DefaultRecheckInterval.
	Settle time.Duration
	// KeepOld keeps the old concrete index after the swap (for a manual
	// rollback: point the alias back at it). Default: false (deleted).
	KeepOld bool
	// Logger receives one line per step. Default: slog.Default().
	Logger *slog.Logger
}

func (o *ReindexOptions) defaults() {
	if o.Settle == 0 {
		o.Settle = 2 * DefaultRecheckInterval
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Reindex applies a mapping change without downtime: StartReindex, then
// backfill (which must rebuild every document of the aggregate through the
// normal build path and return once they are written), then SwapAlias.
// When backfill fails, the reindex is left in progress (sinks keep writing
// to both indexes); run Reindex again to resume, or AbortReindex.
func Reindex(ctx context.Context, es Search, spec IndexSpec, opts ReindexOptions, backfill func(ctx context.Context) error) error {
	if _, err := StartReindex(ctx, es, spec, opts); err != nil {
		return err
	}
	if err := backfill(ctx); err != nil {
		return fmt.Errorf("aggregate %s: reindex backfill: %w", spec.Aggregate, err)
	}
	return SwapAlias(ctx, es, spec, opts)
}

// ReindexAll is Reindex on several engines with one backfill: the
// reindex starts on every engine, the backfill writes to all of them,
// then each swaps its alias.
func ReindexAll(ctx context.Context, engines []Engine, spec IndexSpec, opts ReindexOptions, backfill func(ctx context.Context) error) error {
	for _, e := range engines {
		if _, err := StartReindex(ctx, e.Client, spec, opts); err != nil {
			return fmt.Errorf("%s: %w", e.Kind, err)
		}
	}
	if err := backfill(ctx); err != nil {
		return fmt.Errorf("aggregate %s: reindex backfill: %w", spec.Aggregate, err)
	}
	for _, e := range engines {
		if err := SwapAlias(ctx, e.Client, spec, opts); err != nil {
			return fmt.Errorf("%s: %w", e.Kind, err)
		}
	}
	return nil
}

// StartReindex creates the concrete index of spec and points <alias>-next
// at it, then waits opts.Settle so every sink writes to both indexes. It
// returns the new index. It is idempotent: run again, it resumes the same
// reindex. When the alias does not exist yet, it is created at the new
// index (nothing to swap later). A previous, unfinished reindex towards
// other mappings is abandoned (its index deleted).
func StartReindex(ctx context.Context, es Search, spec IndexSpec, opts ReindexOptions) (string, error) {
	opts.defaults()
	want, al, err := spec.current(ctx, es)
	if err != nil {
		return "", err
	}
	cur := al[spec.Alias]
	if len(cur) == 0 || len(cur) == 1 && cur[0] == want {
		return EnsureIndex(ctx, es, spec)
	}
	if next := al[spec.NextAlias()]; len(next) > 0 && !(len(next) == 1 && next[0] == want) {
		opts.Logger.Warn("abandoning an unfinished reindex towards other mappings", "aggregate", spec.Aggregate, "index", strings.Join(next, ","))
		if err := abort(ctx, es, spec, next, opts); err != nil {
			return "", err
		}
	}
	if err := createIndex(ctx, es, spec, true); err != nil {
		return "", err
	}
	if err := updateAliases(ctx, es, "mark reindex", aliasAction{"add", want, spec.NextAlias()}); err != nil {
		return "", err
	}
	opts.Logger.Info("reindex started: sinks write to both indexes", "aggregate", spec.Aggregate, "alias", spec.Alias,
		"old", strings.Join(cur, ","), "new", want, "settle", opts.Settle)
	if err := sleepCtx(ctx, opts.Settle); err != nil {
		return "", err
	}
	return want, nil
}

// SwapAlias finishes a reindex: it refreshes the new index (so searches
// never move to a partly visible index), then in one atomic _aliases call
// moves the alias from the old index to the new one and removes
// <alias>-next: searches against the alias see one index or the other,
// never none. Then, unless opts.KeepOld, it waits opts.Settle and deletes
// the old index.
func SwapAlias(ctx context.Context, es Search, spec IndexSpec, opts ReindexOptions) error {
	opts.defaults()
	want := spec.IndexName()
	al, err := getAliases(ctx, es, spec.Alias, spec.NextAlias())
	if err != nil {
		return err
	}
	cur, next := al[spec.Alias], al[spec.NextAlias()]
	if len(cur) == 1 && cur[0] == want && len(next) == 0 {
		return nil // already swapped
	}
	if !(len(next) == 1 && next[0] == want) {
		return fmt.Errorf("aggregate %s: no reindex towards %s in progress (%s points at %v): run StartReindex first",
			spec.Aggregate, want, spec.NextAlias(), next)
	}
	// The mapping's own settings (refresh, replicas) before searches move
	// over; then make everything the backfill wrote searchable.
	if _, err := FinishLoad(ctx, es, spec, want); err != nil {
		return err
	}
	code, body, err := do(ctx, es, esapi.IndicesRefreshRequest{Index: []string{want}})
	if err != nil || code != http.StatusOK {
		return fmt.Errorf("aggregate %s: refresh %s before the swap: %w", spec.Aggregate, want, errors.Join(err, esErrorIf(code, body)))
	}
	acts := []aliasAction{{"add", want, spec.Alias}, {"remove", want, spec.NextAlias()}}
	var old []string
	for _, c := range cur {
		if c != want {
			acts = append(acts, aliasAction{"remove", c, spec.Alias})
			old = append(old, c)
		}
	}
	if err := updateAliases(ctx, es, "swap alias "+spec.Alias, acts...); err != nil {
		return err
	}
	opts.Logger.Info("reindex finished: alias swapped", "aggregate", spec.Aggregate, "alias", spec.Alias, "old", strings.Join(old, ","), "new", want)
	if opts.KeepOld || len(old) == 0 {
		return nil
	}
	if err := sleepCtx(ctx, opts.Settle); err != nil {
		return err
	}
	return deleteIndexes(ctx, es, old)
}

// AbortReindex abandons a reindex in progress: it removes <alias>-next,
// waits opts.Settle so sinks stop writing to the new index, and deletes it.
// The alias is untouched.
func AbortReindex(ctx context.Context, es Search, spec IndexSpec, opts ReindexOptions) error {
	opts.defaults()
	al, err := getAliases(ctx, es, spec.Alias, spec.NextAlias())
	if err != nil {
		return err
	}
	return abort(ctx, es, spec, al[spec.NextAlias()], opts)
}

func abort(ctx context.Context, es Search, spec IndexSpec, next []string, opts ReindexOptions) error {
	if len(next) == 0 {
		return nil
	}
	acts := make([]aliasAction, len(next))
	for i, n := range next {
		acts[i] = aliasAction{"remove", n, spec.NextAlias()}
	}
	if err := updateAliases(ctx, es, "remove "+spec.NextAlias(), acts...); err != nil {
		return err
	}
	if err := sleepCtx(ctx, opts.Settle); err != nil {
		return err
	}
	return deleteIndexes(ctx, es, next)
}

// createIndex creates spec's concrete index unless it exists with decant's
// own _meta for this spec. An index of that name without it (auto-created
// by a late write after its deletion) is deleted and created again.
func createIndex(ctx context.Context, es Search, spec IndexSpec, load bool) error {
	name := spec.IndexName()
	for attempt := 0; ; attempt++ {
		code, body, err := do(ctx, es, esapi.IndicesCreateRequest{Index: name, Body: bytes.NewReader(spec.body(load))})
		if err != nil {
			return fmt.Errorf("aggregate %s: create index %s: %w", spec.Aggregate, name, err)
		}
		if code == http.StatusOK {
			return nil
		}
		if !strings.Contains(string(body), "resource_already_exists_exception") {
			return fmt.Errorf("aggregate %s: create index %s: %s", spec.Aggregate, name, esError(code, body))
		}
		hash, err := indexHash(ctx, es, name)
		if err != nil {
			return err
		}
		if hash == spec.Hash() {
			return nil
		}
		if attempt > 0 {
			return fmt.Errorf("aggregate %s: index %s exists but was not created by decant for these mappings: delete it", spec.Aggregate, name)
		}
		if err := deleteIndexes(ctx, es, []string{name}); err != nil {
			return err
		}
	}
}

// indexHash returns the decant_hash recorded in an index's mapping _meta.
func indexHash(ctx context.Context, es Search, index string) (string, error) {
	meta, err := indexMeta(ctx, es, index)
	if err != nil {
		return "", err
	}
	h, _ := meta["decant_hash"].(string)
	return h, nil
}

func deleteIndexes(ctx context.Context, es Search, names []string) error {
	code, body, err := do(ctx, es, esapi.IndicesDeleteRequest{Index: names})
	if err != nil {
		return fmt.Errorf("delete index %s: %w", strings.Join(names, ","), err)
	}
	if code != http.StatusOK && code != http.StatusNotFound {
		return fmt.Errorf("delete index %s: %s", strings.Join(names, ","), esError(code, body))
	}
	return nil
}

type aliasAction struct{ op, index, alias string }

// updateAliases applies alias actions atomically in one _aliases call.
func updateAliases(ctx context.Context, es Search, what string, acts ...aliasAction) error {
	list := make([]map[string]any, len(acts))
	for i, a := range acts {
		list[i] = map[string]any{a.op: map[string]any{"index": a.index, "alias": a.alias}}
	}
	b, _ := json.Marshal(map[string]any{"actions": list})
	code, body, err := do(ctx, es, esapi.IndicesUpdateAliasesRequest{Body: bytes.NewReader(b)})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: %s", what, esError(code, body))
	}
	return nil
}

// getAliases returns, for each of the given alias names that exists, the
// concrete indexes it points at (sorted). Missing aliases are absent.
func getAliases(ctx context.Context, es Search, names ...string) (map[string][]string, error) {
	code, body, err := do(ctx, es, esapi.IndicesGetAliasRequest{Name: names})
	if err != nil {
		return nil, fmt.Errorf("get aliases %s: %w", strings.Join(names, ","), err)
	}
	if code != http.StatusOK && code != http.StatusNotFound {
		return nil, fmt.Errorf("get aliases %s: %s", strings.Join(names, ","), esError(code, body))
	}
	// {"idx":{"aliases":{"a":{}}}, …} plus "error" and "status" members
	// when some names are missing.
	var r map[string]json.RawMessage
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("get aliases %s: %w", strings.Join(names, ","), err)
	}
	out := map[string][]string{}
	for index, raw := range r {
		var v struct {
			Aliases map[string]json.RawMessage `json:"aliases"`
		}
		if json.Unmarshal(raw, &v) != nil {
			continue // "error": "…", "status": 404
		}
		for a := range v.Aliases {
			out[a] = append(out[a], index)
		}
	}
	for _, v := range out {
		sort.Strings(v)
	}
	return out, nil
}

// do sends a request and returns its status and body.
func do(ctx context.Context, es Search, req esapi.Request) (int, []byte, error) {
	res, err := req.Do(ctx, es)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, nil, err
	}
	return res.StatusCode, body, nil
}

// esError turns an error response into a message: "status 400: type: reason".
func esError(code int, body []byte) error {
	var r struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &r) == nil && len(r.Error) > 0 {
		var e bulkError
		if json.Unmarshal(r.Error, &e) == nil && e.Type != "" {
			return fmt.Errorf("status %d: %s", code, e.String())
		}
		return fmt.Errorf("status %d: %s", code, r.Error)
	}
	if len(body) > 300 {
		body = body[:300]
	}
	return fmt.Errorf("status %d: %s", code, body)
}

func esErrorIf(code int, body []byte) error {
	if code == http.StatusOK || code == 0 {
		return nil
	}
	return esError(code, body)
}

// sleepCtx is ctxtime.Sleep returning ctx's error when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if !ctxtime.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}
