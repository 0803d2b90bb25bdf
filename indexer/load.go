package indexer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
)

// Bulk loads. A concrete index that is about to receive every document of
// its aggregate at once — the first start's initial load (EnsureLoadIndex)
// or a reindex (StartReindex) — is created with refresh off and no
// replicas, the settings Elasticsearch and OpenSearch document for bulk
// loads: no segment is published every second while it fills, and each
// document is indexed once instead of once per copy. FinishLoad gives the
// index its mapping's own values back (SwapAlias does it before the swap;
// `decant run` once its initial load has passed every stage). The index's
// mapping _meta carries decant_loading: true until then, so a load that a
// crash interrupted is finished by the next process. Searches during a load
// see the index as it was last refreshed; /v1/wait refreshes explicitly,
// so read-your-writes holds throughout.

// loadingMeta is the _meta key that marks an index created for a bulk load.
const loadingMeta = "decant_loading"

// finishTimeout bounds FinishLoad, which a cancelled context does not
// stop.
const finishTimeout = 30 * time.Second

// The settings a bulk load changes, and whether replicas are left alone
// (the mapping asks for auto_expand_replicas: the cluster decides).
var (
	refreshKeys  = []string{"refresh_interval", "index.refresh_interval"}
	replicasKeys = []string{"number_of_replicas", "index.number_of_replicas"}
	autoExpand   = []string{"auto_expand_replicas", "index.auto_expand_replicas"}
)

// loadSettings returns settings with refresh off and (unless the mapping
// asks for auto_expand_replicas) no replicas.
func loadSettings(settings map[string]any) map[string]any {
	out := withoutSetting(settings, refreshKeys)
	out["refresh_interval"] = "-1"
	if settingOf(settings, autoExpand) == nil {
		out = withoutSetting(out, replicasKeys)
		out["number_of_replicas"] = 0
	}
	return out
}

// withoutSetting returns a copy of settings without keys, at the top level
// and inside "index".
func withoutSetting(settings map[string]any, keys []string) map[string]any {
	out := make(map[string]any, len(settings)+1)
	for k, v := range settings {
		switch {
		case contains(keys, k):
			continue
		case k == "index":
			if m, ok := v.(map[string]any); ok {
				v = withoutSetting(m, keys)
			}
		}
		out[k] = v
	}
	return out
}

// settingOf returns the value settings give to one of keys (top level or
// inside "index"), or nil.
func settingOf(settings map[string]any, keys []string) any {
	for _, k := range keys {
		if v, ok := settings[k]; ok {
			return v
		}
	}
	if m, ok := settings["index"].(map[string]any); ok {
		return settingOf(m, keys)
	}
	return nil
}

func contains(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}

// restoredSettings is what FinishLoad sets: the mapping's refresh interval
// and replica count, or null (the cluster default); replicas 0 with
// ZeroReplicas; replicas untouched under auto_expand_replicas.
func (s IndexSpec) restoredSettings() map[string]any {
	index := map[string]any{"refresh_interval": settingOf(s.Settings, refreshKeys)}
	if settingOf(s.Settings, autoExpand) == nil {
		replicas := settingOf(s.Settings, replicasKeys)
		if replicas == nil && s.ZeroReplicas {
			replicas = 0
		}
		index["number_of_replicas"] = replicas
	}
	return map[string]any{"index": index}
}

// indexMeta returns the _meta of an index's mapping.
func indexMeta(ctx context.Context, es Search, index string) (map[string]any, error) {
	code, body, err := do(ctx, es, esapi.IndicesGetMappingRequest{Index: []string{index}})
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("get mapping of %s: %w", index, errors.Join(err, esErrorIf(code, body)))
	}
	var r map[string]struct {
		Mappings struct {
			Meta map[string]any `json:"_meta"`
		} `json:"mappings"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("get mapping of %s: %w", index, err)
	}
	m, ok := r[index]
	if !ok {
		return nil, fmt.Errorf("get mapping of %s: no such index in the answer", index)
	}
	return m.Mappings.Meta, nil
}

// Loading reports whether index was created for a bulk load that is not
// finished (FinishLoad).
func Loading(ctx context.Context, es Search, index string) (bool, error) {
	meta, err := indexMeta(ctx, es, index)
	if err != nil {
		return false, err
	}
	return meta[loadingMeta] == true, nil
}

// FinishLoad ends the bulk load of index, a concrete index of spec: it
// restores the mapping's refresh interval and replica count, then removes
// the loading mark. It reports whether there was a load to finish; on an
// index that is not being loaded it changes nothing. Idempotent. A
// cancelled ctx does not stop it (below).
func FinishLoad(ctx context.Context, es Search, spec IndexSpec, index string) (bool, error) {
	// Once started, a finish is not stopped by ctx: the settings it gives
	// back make the documents searchable, and a reader who sees them may
	// stop decant at once. A stop then, or as the caller decided to finish,
	// must not leave the index with refresh off or marked as loading until
	// the next start. Three small requests, bounded by finishTimeout; a
	// crash in between is finished by the next process, as before.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	meta, err := indexMeta(ctx, es, index)
	if err != nil {
		return false, fmt.Errorf("aggregate %s: %w", spec.Aggregate, err)
	}
	if meta[loadingMeta] != true {
		return false, nil
	}
	body, _ := json.Marshal(spec.restoredSettings())
	code, resp, err := do(ctx, es, esapi.IndicesPutSettingsRequest{Index: []string{index}, Body: bytes.NewReader(body)})
	if err != nil || code != http.StatusOK {
		return false, fmt.Errorf("aggregate %s: restore the settings of %s after its bulk load: %w", spec.Aggregate, index, errors.Join(err, esErrorIf(code, resp)))
	}
	delete(meta, loadingMeta)
	body, _ = json.Marshal(map[string]any{"_meta": meta})
	code, resp, err = do(ctx, es, esapi.IndicesPutMappingRequest{Index: []string{index}, Body: bytes.NewReader(body)})
	if err != nil || code != http.StatusOK {
		return false, fmt.Errorf("aggregate %s: unmark the bulk load of %s: %w", spec.Aggregate, index, errors.Join(err, esErrorIf(code, resp)))
	}
	return true, nil
}
