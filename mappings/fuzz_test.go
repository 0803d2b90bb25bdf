package mappings

import (
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
