package wire

import (
	"bytes"
	"strings"
	"testing"
)

func TestArenaSlicesStayApart(t *testing.T) {
	var a Arena
	var got [][]byte
	var want []string
	for i := range 200 {
		src := strings.Repeat(string(rune('a'+i%26)), 1+i*37%3000) // some past a chunk's free room
		if i == 100 {
			src = strings.Repeat("z", arenaChunk+5) // larger than a chunk
		}
		b := a.Fill(len(src), func(dst []byte) []byte { return append(dst, src...) })
		if cap(b) != len(b) {
			t.Fatalf("slice %d: cap %d > len %d; an append to it would write into the next", i, cap(b), len(b))
		}
		got, want = append(got, b), append(want, src)
	}
	// A fill that writes more than it said still gets it all.
	long := a.Fill(2, func(dst []byte) []byte {
		return append(append(dst, "ab"...), bytes.Repeat([]byte("x"), arenaChunk)...)
	})
	if len(long) != 2+arenaChunk || string(long[:3]) != "abx" {
		t.Errorf("a longer append: %d bytes, starting %q", len(long), long[:3])
	}
	_ = append(got[0], "overwrite?"...) // cap == len: reallocates, cannot touch got[1]
	compacted := a.Fill(11, func(dst []byte) []byte { return AppendCompact(dst, []byte(`{ "a" : 1 }`)) })
	for i := range got {
		if string(got[i]) != want[i] {
			t.Fatalf("slice %d changed: %.20q…, want %.20q…", i, got[i], want[i])
		}
	}
	if string(compacted) != `{"a":1}` {
		t.Errorf("compacted = %s", compacted)
	}
}
