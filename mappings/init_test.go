package mappings

import (
	"strings"
	"testing"
)

// TestInitGolden writes the starting mapping of each catalog, compares it
// with its golden file and checks that it binds.
func TestInitGolden(t *testing.T) {
	for _, tc := range []struct {
		name, catalog, golden string
		opts                  InitOptions
		aggregates            string // the names of the aggregates, in order; "" skips the check
	}{
		{"kinds", kindsCatalog, "init/kinds.yaml", InitOptions{}, "categories,groups,shipments,users"},
		{"kinds roots", kindsCatalog, "init/kinds-roots.yaml", InitOptions{Roots: []string{"messages", "billing.invoices"}, Depth: 1}, ""},
		{"shop", shopCatalog, "init/shop.yaml", InitOptions{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cat := testCatalog(t, tc.catalog)
			out, err := Init(cat, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.golden, out)
			m := mustBind(t, cat, string(out))
			if tc.aggregates == "" {
				return
			}
			var names []string
			for _, a := range m.Aggregates {
				names = append(names, a.Name)
			}
			if got := strings.Join(names, ","); got != tc.aggregates {
				t.Errorf("aggregates %s", got)
			}
		})
	}
}

func TestInitErrors(t *testing.T) {
	cat := testCatalog(t, kindsCatalog)
	if _, err := Init(cat, InitOptions{Roots: []string{"mesages"}}); err == nil || !strings.Contains(err.Error(), `did you mean "messages"`) {
		t.Errorf("unknown root: %v", err)
	}
	if _, err := Init(cat, InitOptions{Schema: "nope"}); err == nil {
		t.Error("empty schema: no error")
	}
}
