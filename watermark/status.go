package watermark

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/wire"
)

// Status is what `decant status` reports: the slot, the watermarks, the
// dead letters and the documents, with the warnings that need an operator.
type Status struct {
	Slot       SlotStatus       `json:"slot"`
	Watermarks Watermarks       `json:"watermarks"`
	DLQ        int64            `json:"dlq_records"`
	Documents  map[string]int64 `json:"documents"`
	// TableSnapshots are the slot's online table snapshots not done: in
	// progress, requested, or refused (Error).
	TableSnapshots []wire.TableSnapshot `json:"table_snapshots"`
	Warnings       []string             `json:"warnings"`
}

// SlotStatus is the replication slot's state and WAL retention headroom.
type SlotStatus struct {
	Name         string  `json:"name"`
	Active       bool    `json:"active"`
	ConfirmedLSN string  `json:"confirmed_lsn"`
	LagBytes     int64   `json:"lag_bytes"`
	LagSeconds   float64 `json:"lag_seconds"` // walsender flush lag; 0 when idle or not streaming
	WALStatus    string  `json:"wal_status"`
	SafeWALBytes *int64  `json:"safe_wal_bytes"` // bytes until max_slot_wal_keep_size; null when unlimited
}

// DocumentCounter counts the documents of an aggregate in the search sink;
// ok is false when it could not be asked (the aggregate is then left out).
type DocumentCounter func(ctx context.Context, aggregate string) (n int64, ok bool)

// Status reads the slot, the watermarks and the dead-letter count, and the
// documents per aggregate when count is not nil. It fails only when the
// slot or the watermarks cannot be read.
func (t *Tracker) Status(ctx context.Context, count DocumentCounter) (*Status, error) {
	st := &Status{Documents: map[string]int64{}, Warnings: []string{}}
	maxKeep, err := t.slotStatus(ctx, &st.Slot)
	if err != nil {
		return nil, err
	}
	st.Warnings = slotWarnings(st.Slot, maxKeep)
	if st.Watermarks, err = t.Current(ctx); err != nil {
		return nil, err
	}
	if ends, err := t.admin.ListEndOffsets(ctx, wire.DLQTopic(t.cfg.TopicPrefix)); err == nil {
		ends.Each(func(o kadm.ListedOffset) {
			if o.Err == nil {
				st.DLQ += o.Offset
			}
		})
	}
	st.Warnings = append(st.Warnings, t.durabilityWarnings(ctx)...)
	st.TableSnapshots = t.tableSnapshots(ctx)
	if count != nil {
		for _, a := range t.cfg.Aggregates {
			if n, ok := count(ctx, a); ok {
				st.Documents[a] = n
			}
		}
	}
	return st, nil
}

// slotStatus reads the slot row and the server's max_slot_wal_keep_size.
func (t *Tracker) slotStatus(ctx context.Context, s *SlotStatus) (maxKeep string, err error) {
	s.Name = t.cfg.Slot
	var lsn, walStatus *string
	var lag *int64
	var lagSecs *float64
	err = t.db.QueryRow(ctx, `
SELECT s.active, s.confirmed_flush_lsn::text, (`+walLSN+` - s.confirmed_flush_lsn)::int8,
       s.wal_status, s.safe_wal_size,
       (SELECT extract(epoch FROM max(r.flush_lag)) FROM pg_stat_replication r WHERE r.pid = s.active_pid),
       current_setting('max_slot_wal_keep_size')
FROM pg_replication_slots s WHERE s.slot_name = $1`, t.cfg.Slot).
		Scan(&s.Active, &lsn, &lag, &walStatus, &s.SafeWALBytes, &lagSecs, &maxKeep)
	if err != nil {
		return "", fmt.Errorf("replication slot %s: %w (has 'decant stream' or 'decant run' ever started?)", t.cfg.Slot, err)
	}
	if lsn != nil {
		s.ConfirmedLSN = *lsn
	}
	if lag != nil {
		s.LagBytes = *lag
	}
	if lagSecs != nil {
		s.LagSeconds = *lagSecs
	}
	if walStatus != nil {
		s.WALStatus = *walStatus
	}
	return maxKeep, nil
}

// slotWarnings is the pure rule for what needs an operator: WAL lost, WAL
// retention close to max_slot_wal_keep_size, or no streamer on the slot.
func slotWarnings(s SlotStatus, maxKeep string) []string {
	warnings := []string{}
	switch {
	case s.WALStatus == "lost":
		warnings = append(warnings, "the slot has lost WAL it needed: drop it and let decant recreate it (a new snapshot follows)")
	case s.WALStatus == "unreserved" || (s.SafeWALBytes != nil && *s.SafeWALBytes < s.LagBytes/4):
		warnings = append(warnings, fmt.Sprintf("the slot is close to max_slot_wal_keep_size (%s): start the streamer or raise the limit before WAL is removed", maxKeep))
	}
	if !s.Active {
		warnings = append(warnings, "no streamer holds the slot: start 'decant run' or 'decant stream'")
	}
	return warnings
}

// SlotLagGauge is decant_slot_lag_bytes: pg_current_wal_lsn() minus the
// slot's confirmed_flush_lsn, read at scrape time (-1 when unknown), so any
// decant process, not only the streamer, reports it.
func SlotLagGauge(db Querier, slot string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "decant_slot_lag_bytes",
		Help: "pg_current_wal_lsn() minus the slot's confirmed_flush_lsn, read at scrape time (-1 when unknown)."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var lag *int64
			if err := db.QueryRow(ctx, `SELECT (`+walLSN+` - confirmed_flush_lsn)::int8 FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lag); err != nil || lag == nil {
				return -1
			}
			return float64(*lag)
		})
}

// WriteText writes the status for a terminal: the slot, one line per
// stage, dead letters, documents and every warning.
func (r *Status) WriteText(w io.Writer) {
	fmt.Fprintf(w, "slot %s: %s, confirmed %s, lag %s", r.Slot.Name, map[bool]string{true: "active", false: "INACTIVE"}[r.Slot.Active],
		r.Slot.ConfirmedLSN, humanBytes(r.Slot.LagBytes))
	if r.Slot.LagSeconds > 0 {
		fmt.Fprintf(w, " (%s)", time.Duration(r.Slot.LagSeconds*float64(time.Second)).Round(time.Millisecond))
	}
	if r.Slot.SafeWALBytes != nil {
		fmt.Fprintf(w, ", %s before max_slot_wal_keep_size", humanBytes(*r.Slot.SafeWALBytes))
	}
	fmt.Fprintln(w)
	wm := r.Watermarks
	fmt.Fprintf(w, "watermarks (WAL now %s):\n", wm.WALLSN)
	for _, s := range []struct {
		name string
		st   Stage
		unit string
	}{{"stream", wm.Stream, "bytes"}, {"map", wm.Map, "records"}, {"build", wm.Build, "records"}} {
		at := s.st.LSN
		if at == "" {
			at = "behind"
		}
		fmt.Fprintf(w, "  %-6s %-14s lag %d %s\n", s.name, at, s.st.Lag, s.unit)
	}
	fmt.Fprintf(w, "dead letters: %d", r.DLQ)
	if r.DLQ > 0 {
		fmt.Fprint(w, " (ever written to the .dlq topic: inspect them with the Kafka console consumer, see docs/operations.md)")
	}
	fmt.Fprintln(w)
	if len(r.Documents) > 0 {
		var parts []string
		for a, n := range r.Documents {
			parts = append(parts, fmt.Sprintf("%s=%d", a, n))
		}
		fmt.Fprintf(w, "documents: %s\n", strings.Join(parts, " "))
	}
	for _, ts := range r.TableSnapshots {
		switch {
		case ts.Error != "":
			fmt.Fprintf(w, "online snapshot of %s refused: %s\n", ts.Table, ts.Error)
		case ts.ID == "":
			fmt.Fprintf(w, "online snapshot of %s requested, not started\n", ts.Table)
		default:
			fmt.Fprintf(w, "online snapshot of %s: %d rows so far, after key %s\n", ts.Table, ts.Rows, ts.LastKey)
		}
	}
	for _, warn := range r.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", warn)
	}
}

// tableSnapshots reads the slot's online table snapshots that are not
// done from the state topic (none when it cannot be read).
func (t *Tracker) tableSnapshots(ctx context.Context) []wire.TableSnapshot {
	out := []wire.TableSnapshot{}
	topic := wire.StateTopic(t.cfg.TopicPrefix)
	ends, err := t.ends(ctx, []string{topic})
	if err != nil {
		return out
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok || end.Err != nil || end.Offset == 0 {
		return out
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{}, t.kopts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
	if err != nil {
		return out
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	prefix := wire.TableSnapshotKey(t.cfg.Slot, "")
	latest := map[string][]byte{}
	for next := int64(0); next < end.Offset && rctx.Err() == nil; {
		cl.PollFetches(rctx).EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if strings.HasPrefix(string(r.Key), prefix) {
				latest[string(r.Key)] = r.Value
			}
		})
	}
	for _, v := range latest {
		var ts wire.TableSnapshot
		if v != nil && json.Unmarshal(v, &ts) == nil && !ts.Done {
			out = append(out, ts)
		}
	}
	slices.SortFunc(out, func(a, b wire.TableSnapshot) int { return strings.Compare(a.Table, b.Table) })
	return out
}

// humanBytes renders a byte count with a binary unit.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// topicDurability is how durable an existing topic is: its replication
// factor and min.insync.replicas (0 when the broker's default applies and
// could not be read).
type topicDurability struct {
	topic     string
	replicas  int
	minInsync int
}

// durabilityWarnings describes decant's existing topics and warns about
// those less durable than the config asks (see durabilityRule).
func (t *Tracker) durabilityWarnings(ctx context.Context) []string {
	if t.cfg.ReplicationFactor == 0 {
		return nil
	}
	topics := append([]string{wire.StateTopic(t.cfg.TopicPrefix), wire.DLQTopic(t.cfg.TopicPrefix)}, t.cfg.RawTopics...)
	for _, a := range t.cfg.Aggregates {
		topics = append(topics, wire.RefsTopic(t.cfg.TopicPrefix, a), wire.AggTopic(t.cfg.TopicPrefix, a))
	}
	md, err := t.admin.ListTopics(ctx, topics...)
	if err != nil {
		return []string{fmt.Sprintf("cannot check the durability of decant's topics: %v", err)}
	}
	var found []topicDurability
	var names []string
	for _, td := range md.Sorted() {
		if td.Err != nil || len(td.Partitions) == 0 {
			continue // not created yet
		}
		replicas := 0
		for _, p := range td.Partitions {
			if replicas == 0 || len(p.Replicas) < replicas {
				replicas = len(p.Replicas)
			}
		}
		found = append(found, topicDurability{topic: td.Topic, replicas: replicas})
		names = append(names, td.Topic)
	}
	if len(found) == 0 {
		return nil
	}
	rcs, err := t.admin.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return []string{fmt.Sprintf("cannot check the durability of decant's topics: %v", err)}
	}
	for i := range found {
		if rc, err := rcs.On(found[i].topic, nil); err == nil && rc.Err == nil {
			for _, c := range rc.Configs {
				if c.Key == "min.insync.replicas" && c.Value != nil {
					found[i].minInsync, _ = strconv.Atoi(*c.Value)
				}
			}
		}
	}
	return durabilityRule(found, t.cfg.ReplicationFactor, t.cfg.MinInsync)
}

// durabilityRule is the pure rule: a topic with fewer replicas than
// kafka.replication_factor, or whose min.insync.replicas lets Kafka
// acknowledge a record (acks=all) that fewer brokers hold than
// config.Kafka.MinInsync asks (a record on one broker is lost with it),
// gets a warning with the command that fixes it.
func durabilityRule(topics []topicDurability, wantReplicas, wantMinInsync int) []string {
	var out []string
	for _, td := range topics {
		if td.replicas < wantReplicas {
			out = append(out, fmt.Sprintf("topic %s has %d replica(s) while kafka.replication_factor is %d: reassign its partitions (kafka-reassign-partitions.sh) to add replicas", td.topic, td.replicas, wantReplicas))
		}
		if want := min(wantMinInsync, td.replicas); td.minInsync > 0 && td.minInsync < want {
			out = append(out, fmt.Sprintf("topic %s has min.insync.replicas=%d with %d replicas: Kafka acknowledges records that only %d broker(s) hold; fix: kafka-configs.sh --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d", td.topic, td.minInsync, td.replicas, td.minInsync, td.topic, want))
		}
	}
	return out
}
