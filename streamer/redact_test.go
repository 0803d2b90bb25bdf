package streamer

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/decant-cdc/decant/config"
)

// TestRedactorApply: excluded members go, masked and hashed ones are
// replaced (nulls kept), the rest keep their order and bytes, an object
// with nothing to redact comes back as it was, and hashes depend on the
// salt.
func TestRedactorApply(t *testing.T) {
	rd := newRedactors(map[string]config.Redaction{"public.t": {Exclude: []string{"x"}, Mask: []string{"m"}, Hash: []string{"h"}}}, "***", "salt")["public.t"]
	got, err := rd.apply([]byte(`{"id":1,"x":"secret","m":"mail@x","h":"555","n":{"a": [1, 2]},"mnull":null,"h2":null}`))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(`salt"555"`))
	want := `{"id":1,"m":"***","h":"sha256:` + hex.EncodeToString(sum[:]) + `","n":{"a": [1, 2]},"mnull":null,"h2":null}`
	if string(got) != want {
		t.Errorf("redacted row\n%s\nwant\n%s", got, want)
	}
	same := []byte(`{"id":2,"name":"n"}`)
	if got, _ := rd.apply(same); &got[0] != &same[0] {
		t.Errorf("a row with nothing to redact was copied: %s", got)
	}
	if got, _ := rd.apply([]byte("null")); string(got) != "null" {
		t.Errorf("null row = %s", got)
	}
	if _, err := rd.apply([]byte(`[1,2]`)); err == nil {
		t.Error("a row that is not an object was accepted")
	}
	other := newRedactors(map[string]config.Redaction{"public.t": {Hash: []string{"h"}}}, "***", "other salt")["public.t"]
	a, _ := rd.apply([]byte(`{"h":"555"}`))
	b, _ := other.apply([]byte(`{"h":"555"}`))
	c, _ := rd.apply([]byte(`{"h":"555"}`))
	if string(a) == string(b) || string(a) != string(c) {
		t.Errorf("hashes: %s (salt), %s (other salt), %s (salt again): want equal for one salt, different across salts", a, b, c)
	}
	if got := rd.names([]string{"x", "m", "big"}); len(got) != 2 || got[0] != "m" || got[1] != "big" {
		t.Errorf("unchanged_toast names = %v, want the excluded one dropped", got)
	}
}
