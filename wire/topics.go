package wire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/ctxtime"
)

// Topic names. Every topic decant writes starts with the configured prefix
// (kafka.topic_prefix); these functions are the only place names are built.

// RawTopic is the raw change topic of a table: <prefix>.raw.<schema>.<table>.
func RawTopic(prefix, schema, table string) string { return prefix + ".raw." + schema + "." + table }

// StateTopic is the streamer's bookkeeping topic: <prefix>.state. It holds
// the snapshot marker of each slot under SnapshotKey(slot) and the state
// of each table's online snapshot under TableSnapshotKey(slot, table).
func StateTopic(prefix string) string { return prefix + ".state" }

// RefsTopic is the refs topic of an aggregate: <prefix>.refs.<aggregate>.
func RefsTopic(prefix, aggregate string) string { return prefix + ".refs." + aggregate }

// AggTopic is the aggregate topic of an aggregate: <prefix>.agg.<aggregate>.
func AggTopic(prefix, aggregate string) string { return prefix + ".agg." + aggregate }

// DLQTopic is the dead-letter topic every stage writes: <prefix>.dlq.
func DLQTopic(prefix string) string { return prefix + ".dlq" }

// SnapshotKey is the key of a slot's snapshot marker in StateTopic.
func SnapshotKey(slot string) string { return "snapshot/" + slot }

// TableSnapshotKey is the key of a table's online snapshot state in
// StateTopic: tablesnap/<slot>/<schema.table>.
func TableSnapshotKey(slot, table string) string { return "tablesnap/" + slot + "/" + table }

// Topic configs decant creates each kind of topic with (docs/formats.md,
// "Topics at a glance"). Each call returns a new map.

// RawTopicConfigs: raw topics are compacted (keyed by primary key), and a
// record is kept at least a day before a newer one of its key may replace
// it, so that a map stage lagging less than that reads every intermediate
// change (an old foreign key, a delete); one lagging more finds holes in
// the offsets and rebuilds the affected documents whole (resolver's
// gapTracker).
func RawTopicConfigs() map[string]string {
	return map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": strconv.FormatInt(RawMinCompactionLag.Milliseconds(), 10)}
}

// RawMinCompactionLag is the min.compaction.lag.ms of the raw topics
// decant creates.
const RawMinCompactionLag = 24 * time.Hour

// StateTopicConfigs: the state topic is compacted (one partition).
func StateTopicConfigs() map[string]string { return map[string]string{"cleanup.policy": "compact"} }

// RefsTopicConfigs: refs topics are compacted, keyed by aggregate id, so
// that work is never lost to retention however long the build stage is
// down: a ref says "this document changed", and the last ref of an id
// (whose transaction committed last) stands for the ones before it. A
// ref is kept at least a minute before a newer one may replace it, far
// longer than a committed transaction takes to become visible.
func RefsTopicConfigs() map[string]string {
	return map[string]string{"cleanup.policy": "compact", "min.compaction.lag.ms": "60000"}
}

// AggTopicConfigs: aggregate topics are compacted (keyed by aggregate id).
func AggTopicConfigs() map[string]string { return map[string]string{"cleanup.policy": "compact"} }

// DLQTopicConfigs: the dead-letter topic keeps everything for the broker's
// default retention.
func DLQTopicConfigs() map[string]string { return map[string]string{"cleanup.policy": "delete"} }

// EnsureTopic creates topic with partitions, replication factor,
// min.insync.replicas (minInsync; 0 leaves the broker's default) and
// configs (topic configs such as cleanup.policy) unless it exists: Kafka's
// TOPIC_ALREADY_EXISTS is success, and an existing topic is left as it is.
// It then waits, up to 10 s, until every partition of the topic has a
// leader: a topic just created is not produceable at once (producing can
// fail with UNKNOWN_TOPIC_OR_PARTITION). It blocks on the network, does not
// retry the creation itself, and is safe for concurrent use; callers that
// call it per record keep their own set of topics already ensured.
func EnsureTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int32, replicationFactor, minInsync int16, configs map[string]string) error {
	cf := make(map[string]*string, len(configs)+1)
	for k, v := range configs {
		cf[k] = &v
	}
	if minInsync > 0 {
		v := strconv.Itoa(int(minInsync))
		cf["min.insync.replicas"] = &v
	}
	resp, err := adm.CreateTopic(ctx, partitions, replicationFactor, cf, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	// kadm answers ListTopics from the client's metadata cache, which
	// keeps a topic's "unknown" for up to MetadataMinAge (5 s by default)
	// when the broker asked first had not learnt of the new topic yet:
	// seen as 10 s before the map stage joined its group on a first
	// start. A metadata request that asks for the authorized operations
	// is never answered from the cache, so every poll asks the broker.
	fresh := kadm.WithAuthorizedOps(ctx)
	for i := 0; i < 100; i++ {
		td, err := adm.ListTopics(fresh, topic)
		if err == nil && td.Has(topic) && td[topic].Err == nil && len(td[topic].Partitions) > 0 {
			ready := true
			for _, p := range td[topic].Partitions {
				ready = ready && p.Leader >= 0 && p.Err == nil
			}
			if ready {
				return nil
			}
		}
		if !ctxtime.Sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil // not ready after 10 s: let the producer's own retries decide
}

// CommittedReader returns the client options of a reader of aggregate
// topics that stops at end offsets: it reads only the records of committed
// transactions (the build stage writes them in transactions that fence a
// member which lost its partitions, resolver.fence) and keeps the control
// records (transaction markers) so that it sees the last offset of a
// partition, which is often a marker. Skip records whose
// Attrs.IsControl().
func CommittedReader() []kgo.Opt {
	return []kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}
}
