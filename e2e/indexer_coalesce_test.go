package e2e

import (
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/decant-cdc/decant/indexer"
	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

// TestESSinkCoalescesConcurrentWrites (issue 14): writes that wait for a
// bulk request (here one in flight at most) share the next one, and each
// gets its own answer back: 40 concurrent writers of 5 documents each,
// where every writer's documents are either newer than the index's (to be
// written), older (conflicts) or refused (dead-lettered). Far fewer
// requests than writes go out, every document ends as its own writer's
// version says, and exactly the refused ones reach the dead-letter topic
// — an answer handed to the wrong writer would show in one or the other.
func TestESSinkCoalescesConcurrentWrites(t *testing.T) {
	forEachEngine(t, testESSinkCoalescesConcurrentWrites)
}

func testESSinkCoalescesConcurrentWrites(t *testing.T, engine string) {
	es, k := testenv.SearchEngine(t, engine), testenv.Kafka(t)
	ctx := testenv.Ctx(t)
	spec := idxSpecStrict(es, "customer")
	if _, err := indexer.EnsureIndex(ctx, es.Search, spec); err != nil {
		t.Fatal(err)
	}
	s, err := indexer.NewESSink(indexer.ESSinkConfig{Client: es.Search, Kind: es.Kind, Aliases: map[string]string{"customer": spec.Alias},
		Kafka: []kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, TopicPrefix: k.Prefix, Partitions: 1, MaxRequests: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	const writers, per = 40, 5
	var base []wire.Document
	for i := range writers * per {
		base = append(base, idxDoc("customer", fmt.Sprintf(`{"id":%d}`, i), 100, `{"name":"v100","n":100}`))
	}
	idxWrite(t, s, base...)
	before := s.Stats()

	// Writer w: w%3 == 0 newer (v200), 1 older (v50: conflicts), 2 one
	// refused document (a string in a long field) among newer ones.
	var wantDead []string
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, writers)
	for w := range writers {
		docs := make([]wire.Document, per)
		for j := range per {
			id := w*per + j
			switch {
			case w%3 == 1:
				docs[j] = idxDoc("customer", fmt.Sprintf(`{"id":%d}`, id), 50, `{"name":"v50","n":50}`)
			case w%3 == 2 && j == w%per:
				docs[j] = idxDoc("customer", fmt.Sprintf(`{"id":%d}`, id), 200, `{"name":"refused","n":"not a number"}`)
				wantDead = append(wantDead, fmt.Sprintf(`{"id":%d}`, id))
			default:
				docs[j] = idxDoc("customer", fmt.Sprintf(`{"id":%d}`, id), 200, fmt.Sprintf(`{"name":"v200 by writer %d","n":200}`, w))
			}
		}
		wg.Go(func() {
			<-start
			errs <- s.Write(ctx, docs)
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	requests, parts := st.Requests-before.Requests, st.Parts-before.Parts
	t.Logf("%s: %d writes went out in %d bulk requests", engine, parts, requests)
	if parts != writers || requests > writers/4 {
		t.Errorf("%d writes carried by %d bulk requests, want %d writes in at most %d requests (coalesced)", parts, requests, writers, writers/4)
	}
	var conflicts, written int64
	for w := range writers {
		switch w % 3 {
		case 1:
			conflicts += per
		case 2:
			written += per - 1
		default:
			written += per
		}
	}
	if got := st.Conflicts - before.Conflicts; got != conflicts {
		t.Errorf("conflicts %d, want %d", got, conflicts)
	}
	if got := st.Written - before.Written; got != written {
		t.Errorf("written %d, want %d", got, written)
	}
	if err := s.Refresh(ctx, "customer"); err != nil {
		t.Fatal(err)
	}
	for w := range writers {
		for j := range per {
			id := w*per + j
			v, src, _ := idxGet(t, es, spec.Alias, fmt.Sprint(id))
			want, name := int64(200), fmt.Sprintf("v200 by writer %d", w)
			if w%3 == 1 || w%3 == 2 && j == w%per {
				want, name = 100, "v100"
			}
			if v != want || src["name"] != name {
				t.Errorf("document %d: version %d %v, want %d %q", id, v, src, want, name)
			}
		}
	}
	var dead []string
	for _, r := range idxConsume(t, k, wire.DLQTopic(k.Prefix), len(wantDead)) {
		dead = append(dead, string(r.Key))
	}
	sort.Strings(dead)
	sort.Strings(wantDead)
	if fmt.Sprint(dead) != fmt.Sprint(wantDead) {
		t.Errorf("dead letters %v, want %v", dead, wantDead)
	}
}
