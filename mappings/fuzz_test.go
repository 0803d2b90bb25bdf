package mappings

import (
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load (and, when they load, to Bind
// against the shop catalog). Neither may panic or hang; every error must
// carry a file name. Run it with
//
//	go test ./mappings -run=^$ -fuzz=FuzzLoad -fuzztime=1m
func FuzzLoad(f *testing.F) {
	for _, name := range []string{"product_example.yaml", "init/kinds.yaml", "init/shop.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(kindsMapping))
	f.Add([]byte("version: 1\naggregates:\n  a: &x {table: t, relations: {r: *x}}\n"))
	f.Add([]byte("version: 1\naggregates: {a: {table: customers, relations: {o: {table: orders, through: {table: x}}}}}\n"))
	cat := testCatalog(f, shopCatalog)
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Load([]File{{Name: "f.yaml", Data: data}})
		if err != nil {
			for _, e := range err.(ErrorList) {
				if e.File != "f.yaml" || e.Msg == "" {
					t.Fatalf("error without file or message: %#v", e)
				}
			}
			return
		}
		m, err := Bind(set, cat)
		if err != nil {
			if _, ok := err.(ErrorList); !ok {
				t.Fatalf("Bind error %T", err)
			}
		}
		for _, a := range m.Aggregates {
			_ = a.Explain()
			_ = a.IndexMapping()
		}
	})
}

// TestLoadMutations is a deterministic stand-in for the fuzzer in plain
// `go test`: 3000 byte-level mutations of the seeds must not panic.
func TestLoadMutations(t *testing.T) {
	var seeds [][]byte
	for _, name := range []string{"product_example.yaml", "init/kinds.yaml", "init/shop.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	seeds = append(seeds, []byte("version: 1\naggregates:\n  a: &x {table: customers, relations: {r: *x, s: *x}}\n"))
	cat := testCatalog(t, shopCatalog)
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 3000; i++ {
		b := append([]byte(nil), seeds[r.Intn(len(seeds))]...)
		for k := 0; k < 1+r.Intn(4); k++ {
			switch p := r.Intn(len(b)); r.Intn(3) {
			case 0: // change a byte
				b[p] = byte(r.Intn(128))
			case 1: // copy a chunk elsewhere
				q := p + r.Intn(len(b)-p)
				at := r.Intn(len(b))
				b = append(b[:at], append(append([]byte(nil), b[p:q]...), b[at:]...)...)
			case 2: // delete a few bytes
				b = append(b[:p], b[min(len(b), p+r.Intn(10)):]...)
			}
			if len(b) == 0 {
				b = []byte("x")
			}
		}
		set, err := Load([]File{{Name: "f.yaml", Data: b}})
		if err != nil {
			continue
		}
		m, _ := Bind(set, cat)
		for _, a := range m.Aggregates {
			_ = a.Explain()
			_ = a.IndexMapping()
		}
	}
}
