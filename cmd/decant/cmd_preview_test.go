package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/decant-cdc/decant/internal/testenv"
	"github.com/decant-cdc/decant/wire"
)

func TestPreview(t *testing.T) {
	pg := testenv.Postgres(t)
	pg.Exec(t, shopSQL(t))
	cfg := writeConfig(t, pg.DSN, true, map[string]string{"shop.yaml": productExample})
	for _, arg := range []string{"1", `{"id": 1}`} {
		code, out, errOut := runCmd(t, "preview", "customer", arg, "--config", cfg)
		if code != 0 {
			t.Fatalf("preview customer %s: exit %d\n%s", arg, code, errOut)
		}
		var d wire.Document
		if err := json.Unmarshal([]byte(out), &d); err != nil {
			t.Fatalf("output is not an envelope: %v\n%s", err, out)
		}
		var doc map[string]any
		_ = json.Unmarshal(d.Doc, &doc)
		var id bytes.Buffer
		_ = json.Compact(&id, d.ID)
		if d.Aggregate != "customer" || id.String() != `{"id":1}` || d.Deleted || d.Version == 0 || d.LSN != wire.FormatLSN(d.Version) ||
			doc["name"] != "Ann" || doc["signed_up_at"] != "2026-01-02T03:04:05.123456+00:00" {
			t.Errorf("preview customer %s:\n%s", arg, out)
		}
		if !strings.Contains(out, "\n  \"doc\": {\n") {
			t.Errorf("output is not indented:\n%s", out)
		}
	}
	code, out, _ := runCmd(t, "preview", "customer", "999", "--config", cfg)
	if code != 0 || !strings.Contains(out, `"deleted": true`) || !strings.Contains(out, `"doc": null`) {
		t.Errorf("missing id: exit %d\n%s", code, out)
	}
	code, _, errOut := runCmd(t, "preview", "customer", `{"nope":1}`, "--config", cfg)
	if code != 2 || !strings.Contains(errOut, `no value for id column "id"`) {
		t.Errorf("bad id: exit %d %s", code, errOut)
	}
	code, _, errOut = runCmd(t, "preview", "custmer", "1", "--config", cfg)
	if code != 1 || !strings.Contains(errOut, "the mappings define: customer") {
		t.Errorf("unknown aggregate: exit %d %s", code, errOut)
	}
}

func TestResolverCommandsHelp(t *testing.T) {
	for _, name := range []string{"map", "build", "backfill", "preview"} {
		var out, errb bytes.Buffer
		if code := commands[name].run(context.Background(), []string{"--help"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "Examples:") {
			t.Errorf("%s --help: exit %d\n%s", name, code, errb.String())
		}
	}
}
