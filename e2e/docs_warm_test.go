package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// docsWarmDocs is how many documents warmUp sends through each server.
const docsWarmDocs = 40000

// warmUp gives the servers' JVMs the kinds of work the benchmark times
// before its clock starts. Elasticsearch and Kafka compile their hot
// paths as they first run them, and the compiling is CPU they spend on
// whatever runs first: a live backlog drained by decant as the first
// updates after Elasticsearch started cost it 22.2 CPU-seconds and took
// 18.0 s, against 9.4 and 11.4 s one run later on the same servers, while
// the ceiling, measured after decant, always found the JVM warm
// (docs/performance.md, "Twelfth pass"). Decant is a Go binary: nothing
// of its own warms up.
//
// The first min(N, docsWarmDocs) documents, built by the aggregate's
// Build statement, go into a scratch load index as new documents, then
// as decant writes them (external_gte versions through the alias), round
// after round, until Elasticsearch's CPU for a round is within 15% of the
// round before (at most 6); with withES false that part is skipped. Then
// Kafka takes them as records on a scratch topic of 6 partitions and
// gives them back, twice, and then twice more in transactions, read back
// by a consumer group that commits (docsKafkaTxnRound). Each round's CPU
// is logged.
func (d *docsBench) warmUp(b *testing.B, withES bool) {
	b.Helper()
	ctx := testenv.Ctx(b)
	docs := d.warmDocs
	if docs == nil {
		pool, err := pgxpool.New(ctx, d.pg.DSN)
		if err != nil {
			b.Fatal(err)
		}
		docs, err = resBenchDocs(ctx, pool, d.agg, min(d.n, docsWarmDocs))
		pool.Close()
		if err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	var log []string
	if withES {
		alias := d.es.Prefix + "-warm"
		index := d.freshIndex(b, alias, true)
		var prev float64
		for round := range 6 {
			dest, version := index, int64(0)
			if round > 0 {
				dest, version = alias, int64(round)<<40
			}
			cpu0 := readServerCPU()
			if err := idxBulkLoadAs(ctx, d.es, dest, docs, 5<<20, 4, version); err != nil {
				b.Fatalf("warm-up: bulk load round %d: %v", round, err)
			}
			used := readServerCPU()["es"] - cpu0["es"]
			log = append(log, fmt.Sprintf("es:%.1f", used))
			if round > 1 && used > prev*0.85 && used < prev*1.15 {
				break
			}
			prev = used
		}
		d.deleteIndex(b, index)
	}
	topic := d.k.Prefix + ".warm"
	if res, err := d.k.Admin.CreateTopic(ctx, 6, 1, nil, topic); err != nil || res.Err != nil {
		b.Fatalf("warm-up: create %s: %v %v", topic, err, res.Err)
	}
	for range 2 {
		cpu0 := readServerCPU()
		if err := docsKafkaRound(ctx, d.k, topic, docs); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		log = append(log, fmt.Sprintf("kafka:%.1f", readServerCPU()["kafka"]-cpu0["kafka"]))
	}
	for round := range 2 {
		txnTopic := fmt.Sprintf("%s.warm-txn%d", d.k.Prefix, round)
		if res, err := d.k.Admin.CreateTopic(ctx, 6, 1, nil, txnTopic); err != nil || res.Err != nil {
			b.Fatalf("warm-up: create %s: %v %v", txnTopic, err, res.Err)
		}
		cpu0 := readServerCPU()
		if err := docsKafkaTxnRound(ctx, d.k, txnTopic, docs); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		log = append(log, fmt.Sprintf("kafka-txn:%.1f", readServerCPU()["kafka"]-cpu0["kafka"]))
	}
	b.Logf("warm-up with %d documents, CPU-seconds per round: %s", len(docs), strings.Join(log, " "))
}

// docsKafkaRound produces docs to topic and reads them back from its
// start to its end.
func docsKafkaRound(ctx context.Context, k *testenv.KafkaEnv, topic string, docs []wire.Document) error {
	var produced kgo.FirstErrPromise
	for i := range docs {
		k.Client.Produce(ctx, &kgo.Record{Topic: topic, Key: docs[i].ID, Value: docs[i].Doc}, produced.Promise())
	}
	if err := produced.Err(); err != nil { // waits for every record's answer
		return fmt.Errorf("produce to %s: %w", topic, err)
	}
	ends, err := k.Admin.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	var want int64
	ends.Each(func(o kadm.ListedOffset) { want += o.Offset })
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for got := int64(0); got < want; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return fmt.Errorf("read %s back: %w (%d of %d records)", topic, err, got, want)
		}
		got += int64(fs.NumRecords())
	}
	return nil
}

// docsKafkaTxnRound is docsKafkaRound the way decant's stages use Kafka:
// produced in transactions (as the build stage writes the aggregate topic)
// and read back read_committed by a consumer group that commits after
// each poll (as the map and build stages do). The plain round leaves the
// broker's transaction and group coordinators' code to be compiled during
// decant's timed run.
func docsKafkaTxnRound(ctx context.Context, k *testenv.KafkaEnv, topic string, docs []wire.Document) error {
	p, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.TransactionalID(topic+"-txn"), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer p.Close()
	for lo := 0; lo < len(docs); lo += 1000 {
		if err := p.BeginTransaction(); err != nil {
			return err
		}
		var produced kgo.FirstErrPromise
		for i := lo; i < min(lo+1000, len(docs)); i++ {
			p.Produce(ctx, &kgo.Record{Key: docs[i].ID, Value: docs[i].Doc}, produced.Promise())
		}
		err := produced.Err()
		if cerr := p.EndTransaction(ctx, kgo.TransactionEndTry(err == nil)); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("transaction to %s: %w", topic, err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(topic+"-group"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for got := 0; got < len(docs); {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return fmt.Errorf("read %s back in a group: %w (%d of %d records)", topic, err, got, len(docs))
		}
		got += fs.NumRecords()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return fmt.Errorf("commit %s: %w", topic, err)
		}
	}
	return nil
}

// untimedLoads runs decant's whole initial load before the timed one,
// each time on a new slot, new topics and an index of its own, deleting
// the topics and the index after.
//
// warmUp's rounds do not give Kafka's compilers the paths of an initial
// load (a million raw records produced to compacted topics, fetched back
// by the map stage, consumer groups and transactions around them): in the
// first three timed loads after `make infra-up` Kafka's compiler threads
// still spent 7.5, 3.6 and 1.4 CPU-seconds inside decant's run (the loads
// took 40.7, 25.9 and 23.3 s, the fourth 18.1 s), and under 1 in the
// ceiling's runs after them (docs/performance.md, "Twentieth pass"). With these loads first, the
// timed load and the ceiling both run on servers that have done the work.
//
// Once is not enough: read per thread, the JVMs' compilers (Kafka's and
// Elasticsearch's) spent 3.7 CPU-seconds inside the timed load after one
// untimed load, while in the ceiling's runs after it they spent 0.2–0.6;
// on servers just started, four untimed loads cost them 8.7, 3.8, 2.7 and
// 1.9, and the timed load after them 1.5 (docs/performance.md,
// "Twenty-sixth pass"). So the loads repeat, up to docsUntimedMax, until
// the compilers (readJITCPU) spend under docsJITSettled in one of them;
// the BENCH line reports what they spent in the timed load and in the
// ceiling. It returns the first load's time.
func (d *docsBench) untimedLoads(b *testing.B) time.Duration {
	b.Helper()
	var first time.Duration
	for i := range docsUntimedMax {
		jit0 := readJITCPU()
		took := d.untimedLoad(b, i)
		jit, sum := readJITCPU().since(jit0)
		b.Logf("untimed initial load %d (JVMs' warm-up): %.2fs, JIT compilers %.1f CPU-seconds (%s)", i+1, took.Seconds(), sum, jit)
		if i == 0 {
			first = took
		}
		if sum < docsJITSettled {
			break
		}
	}
	return first
}

// docsUntimedMax is how many untimed loads untimedLoads runs at most, and
// docsJITSettled the JIT compilers' CPU-seconds in one load under which
// the JVMs count as warm.
const (
	docsUntimedMax = 4
	docsJITSettled = 1.0
)

// untimedLoad runs the i-th untimed load (see untimedLoads) and returns
// how long it took.
func (d *docsBench) untimedLoad(b *testing.B, i int) time.Duration {
	b.Helper()
	ctx := testenv.Ctx(b)
	k := testenv.Kafka(b)
	alias := fmt.Sprintf("%s-untimed%d", d.alias, i)
	config := d.configFor(b, fmt.Sprintf("untimed%d", i), alias, k.Prefix, "")
	resWaitESQuiet(b, d.es)
	start := time.Now()
	run := testenv.Start(b, "decant run (untimed)", d.logPath(fmt.Sprintf("untimed%d", i)), testenv.DecantCmd(b, nil, "run", "--config", config))
	d.waitLoadedAt(b, run, k.Prefix, func() (bool, error) {
		c, err := freshCount(ctx, d.es, alias, `{"match_all":{}}`)
		return c == d.n, fmt.Errorf("%d documents (%v)", c, err)
	})
	took := time.Since(start)
	if code := run.Term(60 * time.Second); code != 0 {
		b.Fatalf("untimed decant run exited %d after SIGTERM; log:\n%s", code, run.Tail(40))
	}
	d.dropLoad(b, alias, k)
	return took
}

// configFor writes, under d.dir/dir, the mapping with its index renamed
// alias and a decant config for it on topic prefix prefix (a new slot),
// its HTTP port on listen ("" for none), and returns the config's path:
// a load of its own beside d's.
func (d *docsBench) configFor(b *testing.B, dir, alias, prefix, listen string) string {
	b.Helper()
	mapping := strings.Replace(d.mapping, "      index: "+d.alias+"\n", "      index: "+alias+"\n", 1)
	if mapping == d.mapping {
		b.Fatalf("a load of its own: no `index: %s` in the mapping to rename", d.alias)
	}
	if err := os.MkdirAll(filepath.Join(d.dir, dir, "mappings"), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d.dir, dir, "mappings", "shop.yaml"), []byte(mapping), 0o644); err != nil {
		b.Fatal(err)
	}
	return d.config(b, filepath.Join(dir, "run.yaml"), prefix, d.es.URL, listen)
}

// dropLoad deletes the indexes behind alias and the topics of k: what a
// load of its own (configFor) left.
func (d *docsBench) dropLoad(b *testing.B, alias string, k *testenv.KafkaEnv) {
	b.Helper()
	res, err := esapi.IndicesGetAliasRequest{Name: []string{alias}}.Do(testenv.Ctx(b), d.es.Client)
	if err != nil {
		b.Fatal(err)
	}
	var indexes map[string]json.RawMessage
	err = json.NewDecoder(res.Body).Decode(&indexes)
	res.Body.Close()
	if err != nil || res.IsError() || len(indexes) == 0 {
		b.Fatalf("the indexes behind %s: %v (%s)", alias, err, res.Status())
	}
	for index := range indexes {
		d.deleteIndex(b, index)
	}
	if err := k.DeleteTopics(); err != nil {
		b.Fatal(err)
	}
}
