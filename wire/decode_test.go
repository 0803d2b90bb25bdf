package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"
)

// goldenLines returns the lines of testdata/name.
func goldenLines(tb testing.TB, name string) [][]byte {
	tb.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		tb.Fatal(err)
	}
	var out [][]byte
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	return out
}

// changeSeeds are raw values: the golden change, and forms the fast path
// must leave to encoding/json or decode the same way.
var changeSeeds = []string{
	`{"op":"d","schema":"public","table":"t","key":{"id":1},"before":{"id":1},"after":null,"unchanged_toast":[],"source":{"lsn":"0/1","commit_lsn":"0/2","xid":3,"commit_time":"x","seq":0,"snapshot":false}}`,
	`{"op":"c","key":{"a":"b\"c"},"after":{"x":[1,2.5e3,{"y":null}],"z":"\u00e9"},"unchanged_toast":["body","t"]}`,
	`{"OP":"c"}`, `{"op":"c","op":"u"}`, `{"op":"\u0063"}`, `{"op":5}`, `{"source":{"xid":-1}}`,
	`{"source":{"xid":4294967296}}`, `{"source":{"seq":1.5}}`, `{"source":{"seq":-0}}`, `{"source":null,"key":null}`,
	`{"unchanged_toast":null}`, `{"unchanged_toast":[ ]}`, `{"extra":1}`, `null`, `[]`, `{`, `{"op":"c"} x`,
	` { "op" : "u" , "key" : { "id" : 7 } } `, `{"after":{"a":01}}`, `{"after":truex}`, `{"table":"é"}`,
}

func FuzzDecodeChange(f *testing.F) {
	for _, l := range goldenLines(f, "change.golden") {
		f.Add(l)
	}
	for _, s := range changeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want Change
		err := DecodeChange(data, &got)
		werr := json.Unmarshal(data, &want)
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("%q: error %v, encoding/json %v", data, err, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
		}
	})
}

func FuzzDecodeRef(f *testing.F) {
	for _, l := range goldenLines(f, "ref.golden") {
		f.Add(l)
	}
	for _, s := range []string{`{"aggregate":"a","xid":1,"backfill":null,"index":"i"}`, `{"Aggregate":"a"}`, `{"xid":"1"}`, `{"backfill":1}`, `{}`, `{"lsn":"0/0","lsn":"0/1"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want Ref
		err := DecodeRef(data, &got)
		werr := json.Unmarshal(data, &want)
		if (err == nil) != (werr == nil) || err != nil && err.Error() != werr.Error() {
			t.Fatalf("%q: error %v, encoding/json %v", data, err, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", data, got, want)
		}
	})
}

// FuzzScanObject: whatever ScanObject accepts is a valid JSON object with
// the members encoding/json finds (the last of a repeated name wins).
func FuzzScanObject(f *testing.F) {
	for _, l := range goldenLines(f, "change.golden") {
		f.Add(l)
	}
	for _, s := range changeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ms, ok := ScanObject(data, nil)
		if !ok {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("%q: accepted, but not valid JSON", data)
		}
		var want map[string]json.RawMessage
		if err := json.Unmarshal(data, &want); err != nil {
			t.Fatalf("%q: accepted, but encoding/json: %v", data, err)
		}
		got := map[string]json.RawMessage{}
		for _, m := range ms {
			got[string(m.Name)] = m.Value
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %q\nwant %q", data, got, want)
		}
	})
}

// TestDecodeFastPathTaken: decant's own records never need encoding/json,
// and what the fast path must not decode goes to it.
func TestDecodeFastPathTaken(t *testing.T) {
	var ch Change
	for _, l := range goldenLines(t, "change.golden") {
		if !decodeChangeFast(l, &ch) {
			t.Errorf("fast path refused decant's own change %s", l)
		}
	}
	var r Ref
	for _, l := range goldenLines(t, "ref.golden") {
		if !decodeRefFast(l, &r) {
			t.Errorf("fast path refused decant's own ref %s", l)
		}
	}
	for _, s := range []string{`{"OP":"c"}`, `{"op":"c","op":"u"}`, `{"op":"\u0063"}`, `{"extra":1}`, `{"source":{"seq":1.5}}`, `{"table":"é"}`} {
		if decodeChangeFast([]byte(s), &ch) {
			t.Errorf("fast path decoded %s, which is encoding/json's to decode", s)
		}
	}
}

// TestDecodedValuesCannotOverwriteTheRecord: raw values point into the
// record, but appending to one must not write over what follows it.
func TestDecodedValuesCannotOverwriteTheRecord(t *testing.T) {
	data := []byte(`{"op":"u","key":{"id":7},"after":{"id":7,"name":"Ada"}}`)
	orig := string(data)
	var ch Change
	if err := DecodeChange(data, &ch); err != nil {
		t.Fatal(err)
	}
	_ = append(ch.Key, "XXXXXXXXXXXXXXXXXXXX"...)
	if string(data) != orig || string(ch.After) != `{"id":7,"name":"Ada"}` {
		t.Fatalf("appending to the key changed the record: %s", data)
	}
}
