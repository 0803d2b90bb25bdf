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
