package resolver

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// FuzzKeyFastPath checks that the keys' fast path (wire.ScanFlatObject) agrees
// with encoding/json wherever it answers: parseKey's values, looseKey,
// and the members themselves. Where it declines, encoding/json decides.
//
//	go test ./resolver -run '^$' -fuzz FuzzKeyFastPath -fuzztime 1m
func FuzzKeyFastPath(f *testing.F) {
	for _, k := range []string{
		`{"id":7}`, `{"id":"7"}`, `{"id":-0.5e+3}`, `{"order_id":3,"sku":"a-1"}`, `{"sku":"a-1","order_id":3}`,
		` { "id" : 7 } `, "{\n\t\"id\":\r7}", `{}`, `{"id":null}`, `{"id":true}`, `{"id":false}`,
		`{"id":"a\"b"}`, `{"id":"\u0041"}`, `{"i\u0064":7}`, `{"id":"é"}`, `{"id":1,"id":2}`,
		`{"id":01}`, `{"id":1.}`, `{"id":-}`, `{"id":1e}`, `{"id":[1]}`, `{"id":{"a":1}}`, `{"id":7,}`,
		`{"id":7}x`, `{"id" 7}`, `{"id":7`, `{"id":truex}`, `null`, `[1]`, `"id"`, ``, `{"id":"7"`, "{\"id\":\"\x01\"}",
		`{"order_id":3}`, `{"order_id":3,"sku":"a","x":1}`,
	} {
		f.Add([]byte(k))
	}
	aggs := []*mappings.Aggregate{{Name: "one", ID: []string{"id"}}, {Name: "two", ID: []string{"order_id", "sku"}}}
	f.Fuzz(func(t *testing.T, key []byte) {
		ms, ok := wire.ScanFlatObject(key, nil)
		if !ok {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(key, &m); err != nil {
			t.Fatalf("ScanFlatObject read %q, which encoding/json rejects: %v", key, err)
		}
		if len(m) != len(ms) {
			t.Fatalf("ScanFlatObject read %d members of %q, encoding/json %d", len(ms), key, len(m))
		}
		for _, mb := range ms {
			if v, found := m[string(mb.Name)]; !found || !bytes.Equal(v, mb.Value) {
				t.Fatalf("member %q of %q: ScanFlatObject %q, encoding/json %q", mb.Name, key, mb.Value, v)
			}
		}
		if got, want := looseKey(key), looseKeyJSON(key); got != want {
			t.Fatalf("looseKey(%q) = %q, encoding/json's %q", key, got, want)
		}
		for _, a := range aggs {
			fast, fok := parseFlatKey(a, key)
			slow, err := parseKeyJSON(a, key)
			if fok && (err != nil || !slices.EqualFunc(fast, slow, func(x, y json.RawMessage) bool { return bytes.Equal(x, y) })) {
				t.Fatalf("parseKey(%s, %q): fast path %q, encoding/json %q (%v)", a.Name, key, fast, slow, err)
			}
			if !fok && err == nil {
				t.Fatalf("parseKey(%s, %q): the fast path declined a key encoding/json reads as %q", a.Name, key, slow)
			}
		}
	})
}

// TestKeyFastPathTakesDecantsKeys: the keys decant writes take the fast
// path (else it would silently be as slow as before).
func TestKeyFastPathTakesDecantsKeys(t *testing.T) {
	a := &mappings.Aggregate{Name: "two", ID: []string{"order_id", "sku"}}
	key := idKey(a, []json.RawMessage{json.RawMessage(`3`), json.RawMessage(`"a-1"`)})
	vals, ok := parseFlatKey(a, key)
	if !ok || string(vals[0]) != `3` || string(vals[1]) != `"a-1"` {
		t.Fatalf("parseFlatKey(%s) = %q, %v; want [3 \"a-1\"] on the fast path", key, vals, ok)
	}
	if _, ok := wire.ScanFlatObject(key, nil); !ok {
		t.Fatalf("looseKey's fast path declined %s", key)
	}
}

// BenchmarkParseKey compares the fast path with encoding/json on a key
// decant writes.
func BenchmarkParseKey(b *testing.B) {
	a := &mappings.Aggregate{Name: "one", ID: []string{"id"}}
	key := []byte(`{"id":123456}`)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseKey(a, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseKeyJSON(a, key); err != nil {
				b.Fatal(err)
			}
		}
	})
}
