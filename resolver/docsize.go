package resolver

import (
	"sync"

	"github.com/decant-cdc/decant/wire"
)

// The build stage bounds its refs in flight by count (maxPollsInFlight
// polls of pollChunks chunks of BatchSize ids per worker: 64,000 with the
// defaults) and by the bytes their documents take: each document in
// flight is held about ten times over (the row read, its compact copy,
// the Kafka record and the producer's batch, the bulk request body, and
// Go's collector lets the heap reach twice the live data; the fan-out
// test measures it), so 64,000 documents of 1.3 kB made a build stage of
// 770 MB, and of 100 kB would have made one of tens of gigabytes.
// Config.MaxInFlightBytes caps the documents of the refs in flight: with
// larger documents fewer refs are polled.

// docOverhead is what a document costs beyond its JSON and id (the
// wire.Document and the sinks' envelopes).
const docOverhead = 100

// docBytes is what the build stage counts for a document: in its write
// groups (WriteBytes) and in flight (MaxInFlightBytes).
func docBytes(d *wire.Document) int { return len(d.Doc) + len(d.ID) + docOverhead }

// docSizes estimates the bytes of the next documents the build stage
// builds from those it built: an average over chunks that follows a
// change of size within a few chunks.
type docSizes struct {
	mu    sync.Mutex
	avg   float64       // bytes per document; 0 until a chunk with documents was built
	ready chan struct{} // closed once avg is known
}

func newDocSizes() *docSizes { return &docSizes{ready: make(chan struct{})} }

func (d *docSizes) observe(docs []wire.Document) {
	if len(docs) == 0 {
		return
	}
	n := 0
	for i := range docs {
		n += docBytes(&docs[i])
	}
	avg := float64(n) / float64(len(docs))
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.avg == 0 {
		close(d.ready)
	}
	if d.avg == 0 || avg > d.avg {
		d.avg = avg // a larger size counts at once: it is the one that runs out of memory
		return
	}
	d.avg += (avg - d.avg) / 4
}

// refsLimit is how many refs may be in flight: at most count, and no
// more than budget bytes of documents of the estimated size; at least
// one per worker. Until a document was built (known is false), one per
// worker: the first polls are small until the size is known, and a wait
// for room should end when it is (ready).
func (d *docSizes) refsLimit(count, budget, workers int) (limit int, known bool) {
	d.mu.Lock()
	avg := d.avg
	d.mu.Unlock()
	if avg == 0 {
		return min(count, workers), false
	}
	return max(workers, min(count, int(float64(budget)/avg))), true
}
