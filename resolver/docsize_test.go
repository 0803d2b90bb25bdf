package resolver

import (
	"bytes"
	"testing"

	"github.com/decant-cdc/decant/wire"
)

func docsOf(n, size int) []wire.Document {
	docs := make([]wire.Document, n)
	for i := range docs {
		docs[i] = wire.Document{ID: []byte(`{"id":1}`), Doc: bytes.Repeat([]byte("x"), size)}
	}
	return docs
}

// TestRefsLimitFollowsDocumentSize: the build stage's refs in flight are
// one per worker until a document was built, then the count bound or as
// many as MaxInFlightBytes of documents of the size built lately, never
// fewer than one per worker.
func TestRefsLimitFollowsDocumentSize(t *testing.T) {
	const count, budget, workers = 64000, 64 << 20, 4
	d := newDocSizes()
	if got, known := d.refsLimit(count, budget, workers); got != workers || known {
		t.Fatalf("before any document: %d refs (known %v), want %d (one per worker), not known", got, known, workers)
	}
	d.observe(nil) // a chunk of ids that all were deleted builds no document
	if got, known := d.refsLimit(count, budget, workers); got != workers || known {
		t.Fatalf("after an empty chunk: %d refs (known %v), want %d, not known", got, known, workers)
	}
	select {
	case <-d.ready:
		t.Fatal("ready before any document was built")
	default:
	}
	d.observe(docsOf(500, 1200)) // 1,308 bytes each with its id and envelope
	select {
	case <-d.ready:
	default:
		t.Fatal("not ready after a chunk of documents was built")
	}
	if got, _ := d.refsLimit(count, budget, workers); got != 51306 {
		t.Fatalf("1.3 kB documents: %d refs, want 51306 (64 MiB ÷ 1,308 B)", got)
	}
	d.observe(docsOf(10, 100<<10)) // larger documents count at once
	want := budget / (100<<10 + 8 + docOverhead)
	if got, _ := d.refsLimit(count, budget, workers); got != want {
		t.Fatalf("after a chunk of 100 kB documents: %d refs, want %d", got, want)
	}
	for range 40 { // smaller ones again: the estimate comes down within a few chunks
		d.observe(docsOf(500, 1200))
	}
	if got, _ := d.refsLimit(count, budget, workers); got < 51000 || got > 51306 {
		t.Fatalf("after 40 chunks of 1.3 kB documents again: %d refs, want about 51306", got)
	}
	d.observe(docsOf(1, 64<<20)) // one document larger than the budget: one per worker still
	if got, _ := d.refsLimit(count, budget, workers); got != workers {
		t.Fatalf("documents larger than the budget: %d refs, want %d", got, workers)
	}
	small := newDocSizes()
	small.observe(docsOf(500, 10))
	if got, _ := small.refsLimit(count, budget, workers); got != count {
		t.Fatalf("tiny documents: %d refs, want the count bound %d", got, count)
	}
}
