package watermark

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

func TestDurabilityRule(t *testing.T) {
	got := durabilityRule([]topicDurability{
		{topic: "ok3", replicas: 3, minInsync: 2},
		{topic: "one-copy", replicas: 3, minInsync: 1},
		{topic: "too-few", replicas: 1, minInsync: 1},
		{topic: "unknown", replicas: 3, minInsync: 0},
	}, 3, 2)
	want := []string{
		"topic one-copy has min.insync.replicas=1 with 3 replicas: Kafka acknowledges records that only 1 broker(s) hold; fix: kafka-configs.sh --alter --entity-type topics --entity-name one-copy --add-config min.insync.replicas=2",
		"topic too-few has 1 replica(s) while kafka.replication_factor is 3: reassign its partitions (kafka-reassign-partitions.sh) to add replicas",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := durabilityRule([]topicDurability{{topic: "single", replicas: 1, minInsync: 1}}, 1, 1); len(got) != 0 {
		t.Errorf("a single-broker setup as configured gets warnings: %v", got)
	}
}

// TestDurabilityWarningsOnRealTopics: topics created with a
// min.insync.replicas carry it, and Status warns about decant topics with
// fewer replicas than kafka.replication_factor asks (here: 2, while the
// test broker is alone, so every topic has 1).
func TestDurabilityWarningsOnRealTopics(t *testing.T) {
	k := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dlq, raw := wire.DLQTopic(k.Prefix), wire.RawTopic(k.Prefix, "public", "t")
	if err := wire.EnsureTopic(ctx, k.Admin, dlq, 1, 1, 2, wire.DLQTopicConfigs()); err != nil {
		t.Fatal(err)
	}
	if err := wire.EnsureTopic(ctx, k.Admin, raw, 1, 1, 0, wire.RawTopicConfigs()); err != nil {
		t.Fatal(err)
	}
	rcs, err := k.Admin.DescribeTopicConfigs(ctx, dlq)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(dlq, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := ""
	for _, c := range rc.Configs {
		if c.Key == "min.insync.replicas" && c.Value != nil {
			set = *c.Value
		}
	}
	if set != "2" {
		t.Errorf("min.insync.replicas of %s = %q, want 2", dlq, set)
	}
	tr := New(Config{TopicPrefix: k.Prefix, RawTopics: []string{raw}, ReplicationFactor: 2, MinInsync: 2}, nil, k.Admin, nil)
	got := tr.durabilityWarnings(ctx)
	for _, topic := range []string{dlq, raw} {
		if !slices.ContainsFunc(got, func(w string) bool {
			return strings.HasPrefix(w, "topic "+topic+" has 1 replica(s) while kafka.replication_factor is 2")
		}) {
			t.Errorf("no warning about %s in %q", topic, got)
		}
	}
	if len(got) != 2 {
		t.Errorf("warnings %q, want one per existing topic (the state topic does not exist)", got)
	}
}
