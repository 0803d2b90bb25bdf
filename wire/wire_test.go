package wire

import (
	"encoding/json"
	"testing"
)

func TestLSNRoundTrip(t *testing.T) {
	for _, s := range []string{"0/0", "0/16B3748", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		v, err := ParseLSN(s)
		if err != nil {
			t.Fatalf("ParseLSN(%q): %v", s, err)
		}
		if got := FormatLSN(v); got != s {
			t.Errorf("FormatLSN(ParseLSN(%q)) = %q", s, got)
		}
	}
	for _, bad := range []string{"", "16", "x/1", "1/x", "1/100000000"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q): want error", bad)
		}
	}
}

func TestKey(t *testing.T) {
	got := string(Key([]KeyField{{"order_id", []byte("7")}, {"line no", []byte(`"2"`)}, {"x", nil}}))
	want := `{"order_id":7,"line no":"2","x":null}`
	if got != want {
		t.Fatalf("Key = %s, want %s", got, want)
	}
}

// TestAppendStringMatchesMarshal: the fast path of AppendString writes
// what json.Marshal writes, for strings that need escaping and for those
// that do not.
func TestAppendStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "id", "order_id", "Customer Id", `a"b`, `a\b`, "<x>&", "tab\there", "line\n", "\x00", "\x7f", "é", "日本", "\xff", "emoji 🙂", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := AppendString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("AppendString(%q) = %s, want %s", s, got[1:], want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("id")
	f.Add("a\"<\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}
