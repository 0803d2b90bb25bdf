package wire

// arenaChunk is the size of an Arena's chunks: a batch's documents (1–2
// KB each in the demo) share a few allocations instead of one each.
const arenaChunk = 64 << 10

// An Arena hands out byte slices carved from shared chunks, for values
// that live and die together (the documents of one build). A slice keeps
// its whole chunk alive. The zero Arena is ready to use; it is not safe
// for concurrent use.
type Arena struct {
	buf []byte
}

// Fill returns the bytes fill appends to an empty slice with room for n,
// as a slice of the arena whose capacity ends where it does. fill should
// append at most n bytes: more is correct but allocates.
func (a *Arena) Fill(n int, fill func(dst []byte) []byte) []byte {
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]byte, 0, max(arenaChunk, n))
	}
	start := len(a.buf)
	a.buf = fill(a.buf)
	return a.buf[start:len(a.buf):len(a.buf)]
}
