package streamer

import (
	"strings"
	"testing"
)

// TestWantFailover: which slots are failover slots.
func TestWantFailover(t *testing.T) {
	for _, tc := range []struct {
		setting string
		srv     serverInfo
		want    bool
		err     string
	}{
		{"auto", serverInfo{versionNum: 170006}, true, ""},
		{"auto", serverInfo{versionNum: 160010}, false, ""},
		{"auto", serverInfo{versionNum: 180001, inRecovery: true}, false, ""},
		{"false", serverInfo{versionNum: 170006}, false, ""},
		{"true", serverInfo{versionNum: 170006}, true, ""},
		{"true", serverInfo{versionNum: 160010}, false, "postgres.dsn is PostgreSQL 16.10"},
		{"true", serverInfo{versionNum: 170006, inRecovery: true}, false, "postgres.dsn is a standby"},
	} {
		s := &Streamer{cfg: Config{SlotFailover: tc.setting}}
		got, err := s.wantFailover(tc.srv)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) || err != nil && !isPermanent(err) {
			t.Errorf("slot_failover %s on %+v: %v, %v; want %v, error containing %q (permanent)", tc.setting, tc.srv, got, err, tc.want, tc.err)
		}
	}
	if got := createSlotSQL("decant", "EXPORT_SNAPSHOT", true); got != `CREATE_REPLICATION_SLOT "decant" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)` {
		t.Errorf("createSlotSQL failover: %s", got)
	}
	if got := createSlotSQL("decant", "NOEXPORT_SNAPSHOT", false); got != `CREATE_REPLICATION_SLOT "decant" LOGICAL pgoutput NOEXPORT_SNAPSHOT` {
		t.Errorf("createSlotSQL: %s", got)
	}
}
