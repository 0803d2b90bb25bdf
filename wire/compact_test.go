package wire

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestAppendCompact(t *testing.T) {
	for _, in := range []string{
		`{"id" : 1, "name" : "a b\" c", "orders" : [{"id" : 2}, ` + "\n " + `{"id" : 3}]}`,
		`[]`, `"x"`, `{"k\\" : "\\", "t":"\t"}`, " { \"a\" :\r\n\t[ 1 , 2 ] } ",
	} {
		var want bytes.Buffer
		if err := json.Compact(&want, []byte(in)); err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got := AppendCompact([]byte("pre"), []byte(in)); string(got) != "pre"+want.String() {
			t.Errorf("AppendCompact(%q) = %q, want %q", in, got[3:], want.String())
		}
	}
}

func FuzzAppendCompact(f *testing.F) {
	f.Add(`{"id" : 1, "a" : [1, ` + "\n" + ` "x \" y"]}`)
	f.Fuzz(func(t *testing.T, in string) {
		var want bytes.Buffer
		if json.Compact(&want, []byte(in)) != nil {
			return
		}
		if got := AppendCompact(nil, []byte(in)); string(got) != want.String() {
			t.Fatalf("AppendCompact(%q) = %q, want %q", in, got, want.String())
		}
	})
}

// BenchmarkAppendCompact compacts a document shaped like the demo shop's
// (PostgreSQL's json builders' spacing, nested orders and lines).
func BenchmarkAppendCompact(b *testing.B) {
	var doc bytes.Buffer
	doc.WriteString(`{"id" : 12345, "name" : "Customer 12345", "email" : "customer12345@example.com", "tags" : ["vip", "newsletter"], "orders" : [`)
	for o := range 3 {
		if o > 0 {
			doc.WriteString(", \n ")
		}
		doc.WriteString(`{"id" : 98765, "status" : "shipped", "placed_at" : "2026-11-30T12:34:56.789+00:00", "lines" : [`)
		for l := range 3 {
			if l > 0 {
				doc.WriteString(", \n ")
			}
			doc.WriteString(`{"line_no" : 1, "qty" : 2, "product" : {"sku" : "SKU-000123", "title" : "Product \"123\" deluxe", "price" : 19.99}}`)
		}
		doc.WriteString(`]}`)
	}
	doc.WriteString(`]}`)
	src := doc.Bytes()
	dst := make([]byte, 0, len(src))
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		dst = AppendCompact(dst[:0], src)
	}
}
