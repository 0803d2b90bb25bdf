package mappings

import "strings"

// IndexMapping returns the Elasticsearch mapping of the aggregate's index:
// one property per document key, typed from the PostgreSQL column types,
// deep-merged with the YAML `elasticsearch.mappings` (the YAML wins).
//
// Type rules (see docs/mappings.md):
//
//	text, varchar, char, citext, name  text with a keyword sub-field
//	smallint / integer / bigint         short / integer / long
//	numeric, double precision / real    double / float (_source keeps the exact value)
//	boolean                             boolean
//	date, timestamp, timestamptz        date
//	uuid, enums, time, interval, inet…  keyword
//	json, jsonb                         object (dynamic)
//	bytea                               keyword, not indexed
//	arrays                              the element's type
//	relations                           object (set `type: nested` in YAML for nested queries)
func (a *Aggregate) IndexMapping() map[string]any {
	m := map[string]any{"properties": nodeProperties(a.Root)}
	return mergeMapping(m, a.ESMappings)
}

// mergeMapping merges a YAML mapping over a generated one. A property whose
// YAML type differs from the generated scalar type replaces it whole (so
// `{type: keyword}` drops the generated text sub-fields); objects merge
// (so `{type: nested}` keeps the generated properties).
func mergeMapping(base, over map[string]any) map[string]any {
	out := deepMerge(base, over)
	bp, ok1 := base["properties"].(map[string]any)
	op, ok2 := over["properties"].(map[string]any)
	if !ok1 || !ok2 {
		return out
	}
	props := deepMerge(bp, nil)
	for k, v := range op {
		bv, ok1 := bp[k].(map[string]any)
		ov, ok2 := v.(map[string]any)
		if !ok1 || !ok2 {
			props[k] = v
			continue
		}
		bt, _ := bv["type"].(string)
		ot, hasType := ov["type"].(string)
		if hasType && ot != bt && bt != "object" && bt != "nested" {
			props[k] = ov
			continue
		}
		props[k] = mergeMapping(bv, ov)
	}
	out["properties"] = props
	return out
}

// IndexSettings returns the index settings: number_of_shards 1 unless the
// YAML `elasticsearch.settings` says otherwise. Replicas are left to the
// cluster default.
func (a *Aggregate) IndexSettings() map[string]any {
	return deepMerge(map[string]any{"number_of_shards": 1}, a.ESSettings)
}

func nodeProperties(n *Node) map[string]any {
	props := map[string]any{}
	for _, c := range n.Columns {
		props[n.OutputName(c)] = columnMapping(n.table.Column(c))
	}
	for _, f := range n.Fields {
		if f.Type != "" { // else dynamic mapping decides
			props[f.Name] = columnMapping(typeColumn(f.Type))
		}
	}
	for _, c := range n.Children {
		if c.Value != "" {
			props[c.Name] = columnMapping(c.table.Column(c.Value))
			continue
		}
		props[c.Name] = map[string]any{"type": "object", "properties": nodeProperties(c)}
	}
	return props
}

func columnMapping(c *Column) map[string]any {
	t := c.BaseType
	if c.Category == 'A' && c.ElemType != "" {
		t = c.ElemType
	}
	switch t {
	case "text", "character varying", "character", "citext", "name":
		return map[string]any{"type": "text", "fields": map[string]any{"keyword": map[string]any{"type": "keyword", "ignore_above": 256}}}
	case "smallint":
		return map[string]any{"type": "short"}
	case "integer":
		return map[string]any{"type": "integer"}
	case "bigint", "oid":
		return map[string]any{"type": "long"}
	case "numeric", "double precision":
		return map[string]any{"type": "double"}
	case "real":
		return map[string]any{"type": "float"}
	case "boolean":
		return map[string]any{"type": "boolean"}
	case "date", "timestamp without time zone", "timestamp with time zone":
		return map[string]any{"type": "date"}
	case "json", "jsonb":
		return map[string]any{"type": "object"}
	case "bytea":
		return map[string]any{"type": "keyword", "index": false, "doc_values": false}
	}
	if strings.HasPrefix(t, "bit") {
		return map[string]any{"type": "keyword"}
	}
	return map[string]any{"type": "keyword", "ignore_above": 256}
}

// deepMerge returns base with over merged in: maps merge key by key, any
// other value of over replaces base's. Neither argument is modified.
func deepMerge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		bm, ok1 := out[k].(map[string]any)
		om, ok2 := v.(map[string]any)
		if ok1 && ok2 {
			out[k] = deepMerge(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}

// typeColumn describes a value of PostgreSQL type t (format_type's name,
// "integer[]" for arrays) as columnMapping reads a column.
func typeColumn(t string) *Column {
	if elem, ok := strings.CutSuffix(t, "[]"); ok {
		return &Column{BaseType: t, Category: 'A', ElemType: elem}
	}
	return &Column{BaseType: t}
}
