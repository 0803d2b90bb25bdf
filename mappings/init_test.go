package mappings

import (
	"strings"
	"testing"
)

func TestInitGolden(t *testing.T) {
	cat := testCatalog(t, kindsCatalog)
	out, err := Init(cat, InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "init/kinds.yaml", out)
	m := mustBind(t, cat, string(out))
	var names []string
	for _, a := range m.Aggregates {
		names = append(names, a.Name)
	}
	if got := strings.Join(names, ","); got != "categories,groups,shipments,users" {
		t.Errorf("aggregates %s", got)
	}

	out, err = Init(cat, InitOptions{Roots: []string{"messages", "billing.invoices"}, Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "init/kinds-roots.yaml", out)
	mustBind(t, cat, string(out))

	if _, err := Init(cat, InitOptions{Roots: []string{"mesages"}}); err == nil || !strings.Contains(err.Error(), `did you mean "messages"`) {
		t.Errorf("unknown root: %v", err)
	}
	if _, err := Init(cat, InitOptions{Schema: "nope"}); err == nil {
		t.Error("empty schema: no error")
	}
}

func TestInitShop(t *testing.T) {
	cat := testCatalog(t, shopCatalog)
	out, err := Init(cat, InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "init/shop.yaml", out)
	mustBind(t, cat, string(out))
}
