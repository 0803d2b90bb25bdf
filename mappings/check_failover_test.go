package mappings

import (
	"strings"
	"testing"
)

// TestCheckFailover: the problems of failover slots (issue 16), from the
// settings of the server postgres.dsn reaches and of its other hosts.
func TestCheckFailover(t *testing.T) {
	primary := ServerSettings{Addr: "db1:5432", VersionNum: 170006, SynchronizedStandbySlots: "decant_standby", PhysicalSlots: []string{"decant_standby"}}
	standby := ServerSettings{Addr: "db2:5432", VersionNum: 170006, Standby: true, SyncReplicationSlots: "on", HotStandbyFeedback: "on",
		PrimarySlotName: "decant_standby", ConninfoReadable: true, ConninfoDBName: true}
	base := FailoverEnv{SlotFailover: "auto", Hosts: 2, TargetSessionAttrs: "primary", Server: primary, Others: []ServerSettings{standby}}
	for _, tc := range []struct {
		name string
		edit func(*FailoverEnv)
		want []string // substrings of the problems, in order
	}{
		{"set up", func(*FailoverEnv) {}, nil},
		{"off", func(e *FailoverEnv) { e.SlotFailover, e.Server.SynchronizedStandbySlots = "false", "" }, nil},
		{"one host, no standby", func(e *FailoverEnv) {
			e.Hosts, e.Others, e.Server.SynchronizedStandbySlots, e.Server.PhysicalSlots = 1, nil, "", nil
		}, nil},
		{"16 with two hosts", func(e *FailoverEnv) { e.Server.VersionNum = 160010 },
			[]string{"warning: postgres.dsn lists 2 hosts but PostgreSQL 16.10 has no failover slots"}},
		{"true on 16", func(e *FailoverEnv) { e.SlotFailover, e.Server.VersionNum = "true", 160010 },
			[]string{"error: streamer.slot_failover is true but db1:5432 is PostgreSQL 16.10"}},
		{"true on a standby", func(e *FailoverEnv) { e.SlotFailover, e.Server = "true", standby },
			[]string{"error: streamer.slot_failover is true but postgres.dsn reached a standby (db2:5432)"}},
		{"auto on a standby", func(e *FailoverEnv) { e.Server = standby }, nil},
		{"no target_session_attrs", func(e *FailoverEnv) { e.TargetSessionAttrs = "" },
			[]string{"warning: postgres.dsn lists 2 hosts without target_session_attrs=primary"}},
		{"no synchronized_standby_slots", func(e *FailoverEnv) { e.Server.SynchronizedStandbySlots = "" },
			[]string{"warning: synchronized_standby_slots is empty on the primary db1:5432"}},
		{"a missing slot in synchronized_standby_slots", func(e *FailoverEnv) { e.Server.SynchronizedStandbySlots = "decant_standby, gone" },
			[]string{`error: synchronized_standby_slots on the primary db1:5432 names "gone", which is not a physical slot there`}},
		{"standby not set up", func(e *FailoverEnv) {
			e.Others[0].SyncReplicationSlots, e.Others[0].HotStandbyFeedback, e.Others[0].PrimarySlotName, e.Others[0].ConninfoDBName = "off", "off", "", false
		}, []string{"warning: the standby db2:5432 has sync_replication_slots = off", "warning: the standby db2:5432 has hot_standby_feedback = off",
			"warning: the standby db2:5432 has no primary_slot_name", "warning: primary_conninfo on the standby db2:5432 names no dbname"}},
		{"standby's slot not listed", func(e *FailoverEnv) {
			e.Server.SynchronizedStandbySlots, e.Server.PhysicalSlots = "other", []string{"other", "decant_standby"}
		}, []string{`warning: synchronized_standby_slots on the primary does not name the standby db2:5432's slot "decant_standby"`}},
		{"standby of 16", func(e *FailoverEnv) { e.Others[0].VersionNum = 160010 },
			[]string{"warning: the standby db2:5432 is PostgreSQL 16.10: it cannot keep a copy of the failover slot"}},
		{"unreadable conninfo", func(e *FailoverEnv) { e.Others[0].ConninfoReadable = false },
			[]string{"warning: cannot read primary_conninfo on the standby db2:5432"}},
		{"unreachable host", func(e *FailoverEnv) { e.Others[0] = ServerSettings{Addr: "db2:5432", Err: "connection refused"} },
			[]string{"warning: could not check host db2:5432 of postgres.dsn: connection refused"}},
		{"a second primary", func(e *FailoverEnv) { e.Others[0] = primary },
			[]string{"warning: host db1:5432 of postgres.dsn is not a standby but a second primary"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := base
			env.Others = append([]ServerSettings(nil), base.Others...)
			tc.edit(&env)
			var got []string
			for _, p := range CheckFailover(env) {
				got = append(got, p.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("problems:\n%s\nwant %d: %q", strings.Join(got, "\n"), len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d:\n%s\nwant it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestConninfoHasDBName(t *testing.T) {
	for conninfo, want := range map[string]bool{
		"host=db1 port=5432 user=postgres dbname=postgres application_name=s": true,
		"dbname = 'my db' host=db1":              true,
		"host=db1 user=postgres":                 false,
		"host=db1 dbname=''":                     false,
		"postgresql://u@db1:5432/postgres?x=y":   true,
		"postgresql://u@db1:5432?application=x":  false,
		"host=db1 application_name=mydbname=foo": false,
	} {
		if got := conninfoHasDBName(conninfo); got != want {
			t.Errorf("conninfoHasDBName(%q) = %v, want %v", conninfo, got, want)
		}
	}
}
