package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/elastic/go-elasticsearch/v8/esapi"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/internal/testenv"
)

// TestSmokePostgresLogicalReplication proves the server does logical
// decoding: a slot and a publication created through pglogrepl deliver an
// insert as a pgoutput message.
func TestSmokePostgresLogicalReplication(t *testing.T) {
	pg := testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(testenv.Ctx(t), 60*time.Second)
	defer cancel()
	pg.Exec(t, `CREATE TABLE items (id int PRIMARY KEY, name text)`)
	pg.Exec(t, `CREATE PUBLICATION smoke FOR TABLE items`)

	var walLevel string
	if err := pg.Pool.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil || walLevel != "logical" {
		t.Fatalf("wal_level = %q (%v), want logical", walLevel, err)
	}

	conn, err := pgconn.Connect(ctx, pg.DSN+"&replication=database")
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	defer conn.Close(context.Background())
	if _, err := pglogrepl.IdentifySystem(ctx, conn); err != nil {
		t.Fatalf("IDENTIFY_SYSTEM: %v", err)
	}
	slot, err := pglogrepl.CreateReplicationSlot(ctx, conn, "smoke", "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true})
	if err != nil {
		t.Fatalf("create slot: %v", err)
	}
	start, err := pglogrepl.ParseLSN(slot.ConsistentPoint)
	if err != nil {
		t.Fatal(err)
	}
	err = pglogrepl.StartReplication(ctx, conn, "smoke", start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'smoke'"},
	})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}
	pg.Exec(t, `INSERT INTO items VALUES (42, 'hello')`)

	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			t.Fatalf("waiting for the insert on the slot: %v", err)
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			t.Fatal(err)
		}
		m, err := pglogrepl.Parse(xld.WALData)
		if err != nil {
			t.Fatal(err)
		}
		if ins, ok := m.(*pglogrepl.InsertMessage); ok {
			got := []string{string(ins.Tuple.Columns[0].Data), string(ins.Tuple.Columns[1].Data)}
			if got[0] != "42" || got[1] != "hello" {
				t.Fatalf("insert tuple = %v, want [42 hello]", got)
			}
			return
		}
	}
}

// TestSmokeKafka produces one record and consumes it back.
func TestSmokeKafka(t *testing.T) {
	k := testenv.Kafka(t)
	ctx, cancel := context.WithTimeout(testenv.Ctx(t), 60*time.Second)
	defer cancel()
	topic := k.Prefix + ".smoke"
	if _, err := k.Admin.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	if err := k.Client.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(`{"id":1}`), Value: []byte("v1")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(k.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("no record consumed from %s: %v", topic, err)
		}
		fs.EachError(func(_ string, _ int32, err error) { t.Fatalf("fetch: %v", err) })
		var got []*kgo.Record
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
		if len(got) > 0 {
			if string(got[0].Key) != `{"id":1}` || string(got[0].Value) != "v1" {
				t.Fatalf("consumed %s=%s", got[0].Key, got[0].Value)
			}
			return
		}
	}
}

// TestSmokeElasticsearch indexes with an external version, searches, and
// shows that an older version is rejected with 409 — the property the
// indexer's "no stale overwrite" guarantee rests on.
func TestSmokeElasticsearch(t *testing.T) {
	es := testenv.Elasticsearch(t)
	index := es.Prefix + "-smoke"
	if code, body := es.Do(t, esapi.IndicesCreateRequest{Index: index,
		Body: strings.NewReader(`{"settings":{"number_of_shards":1,"number_of_replicas":0}}`)}); code != 200 {
		t.Fatalf("create index: %d %s", code, body)
	}
	put := func(version int, name string) int {
		code, _ := es.Do(t, esapi.IndexRequest{Index: index, DocumentID: "7", Body: strings.NewReader(fmt.Sprintf(`{"name":%q}`, name)),
			Version: &version, VersionType: "external_gte", Refresh: "true"})
		return code
	}
	if code := put(5, "new"); code != 201 {
		t.Fatalf("index version 5: status %d, want 201", code)
	}
	if code := put(3, "old"); code != http.StatusConflict {
		t.Fatalf("index version 3 after 5: status %d, want 409", code)
	}
	code, body := es.Do(t, esapi.SearchRequest{Index: []string{index}, Body: strings.NewReader(`{"query":{"match":{"name":"new"}}}`)})
	if code != 200 {
		t.Fatalf("search: %d %s", code, body)
	}
	var sr struct {
		Hits struct {
			Hits []struct {
				ID     string          `json:"_id"`
				Source json.RawMessage `json:"_source"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(body, &sr); err != nil {
		t.Fatal(err)
	}
	if len(sr.Hits.Hits) != 1 || sr.Hits.Hits[0].ID != "7" {
		t.Fatalf("search hits = %s, want document 7", body)
	}
}
