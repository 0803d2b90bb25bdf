package resolver

import (
	"testing"

	"github.com/decant-cdc/decant/config"
)

// TestConfigFromBulkBytes: the build stage groups documents for the sinks
// at indexer.bulk_bytes, the size of one bulk request, so a user's larger
// (or smaller) request size is what Elasticsearch gets, not the
// resolver's own default.
func TestConfigFromBulkBytes(t *testing.T) {
	cfg := config.Default()
	if got := ConfigFrom(&cfg, nil, nil, nil).WriteBytes; got != cfg.Indexer.BulkBytes {
		t.Errorf("default: WriteBytes %d, want indexer.bulk_bytes %d", got, cfg.Indexer.BulkBytes)
	}
	cfg.Indexer.BulkBytes = 10 << 20
	c := ConfigFrom(&cfg, nil, nil, nil)
	c.defaults()
	if c.WriteBytes != 10<<20 {
		t.Errorf("indexer.bulk_bytes 10 MiB: WriteBytes %d after defaults, want %d", c.WriteBytes, 10<<20)
	}
}
