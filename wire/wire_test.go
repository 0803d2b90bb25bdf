package wire

import "testing"

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
