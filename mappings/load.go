package mappings

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// File is one mapping file: its name (used in error messages) and content.
type File struct {
	Name string
	Data []byte
}

// Set is the parsed, syntactically valid content of one or more mapping
// files, before it is checked against a database catalog by Bind.
type Set struct {
	aggs []*aggSpec // sorted by name
}

// Names returns the aggregate names, sorted.
func (s *Set) Names() []string {
	names := make([]string, len(s.aggs))
	for i, a := range s.aggs {
		names[i] = a.name
	}
	return names
}

// aggSpec is one aggregate as written.
type aggSpec struct {
	name     string
	at       pos // the aggregate's name key
	root     *relSpec
	id       []string
	idAt     pos
	index    string
	settings map[string]any
	mappings map[string]any
}

// relSpec is the root or one relation as written.
type relSpec struct {
	name string
	at   pos // the relation's name key (the aggregate's for the root)
	tableKeys
	through *throughSpec

	single   bool
	singleAt pos
	value    string
	valueAt  pos

	columnsSet bool
	columns    []string
	columnAt   []pos
	rename     map[string]string
	renameAt   map[string]pos
	renameKeys []string // in file order
	orderBy    []orderSpec
	relations  []*relSpec
	where      string // a SQL boolean over the table's row: which rows are documents (root) or belong (relation)
	whereAt    pos
	fields     []fieldSpec // computed document keys, in file order
}

// fieldSpec is one computed key: a SQL expression over the node's row, or
// an aggregate function over one of its relations.
type fieldSpec struct {
	name     string
	at       pos
	expr     string
	fn       string // count, max, min, sum, avg; "" for an expression
	relation string // the relation fn reads
	column   string // the relation's column (not for count)
}

type throughSpec struct {
	at pos
	tableKeys
}

// tableKeys are the keys a relation and its through share: the table and
// the columns that link it.
type tableKeys struct {
	schema    string
	schemaSet bool
	table     string
	tableAt   pos

	foreignKey []string
	fkAt       pos
	references []string
	refAt      pos
}

type orderSpec struct {
	column string
	desc   bool
	nulls  string // "", "first" or "last"
	at     pos
}

const (
	// maxDepth bounds how deep relations nest. A deeper tree is almost
	// certainly a mistake (or YAML aliases that repeat a subtree), and
	// PostgreSQL would have to plan one subquery per level.
	maxDepth = 32
	// maxNodes bounds the YAML nodes visited per file, counting alias
	// expansions, so that a file of nested aliases cannot make Load run
	// for ever.
	maxNodes = 200_000
)

var aggregateNameRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]*$`)

// LoadPaths reads the files at paths and calls Load.
func LoadPaths(paths []string) (*Set, error) {
	if len(paths) == 0 {
		return nil, errors.New("mappings: no mapping files given")
	}
	files := make([]File, 0, len(paths))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("mappings: %w", err)
		}
		files = append(files, File{Name: p, Data: data})
	}
	return Load(files)
}

// Load parses and validates mapping files. It reports every problem it
// finds, as an ErrorList, each with file:line:column and the key path.
// Load needs no database: names of tables and columns are checked by Bind.
func Load(files []File) (*Set, error) {
	if len(files) == 0 {
		return nil, ErrorList{{File: "<mappings>", Msg: "no mapping files given"}}
	}
	var errs ErrorList
	seen := map[string]*aggSpec{}
	set := &Set{}
	for _, f := range files {
		l := &loader{file: f.Name}
		aggs := l.parseFile(f.Data)
		errs = append(errs, l.errs...)
		for _, a := range aggs {
			if prev, ok := seen[a.name]; ok {
				errs = append(errs, a.at.errorf("aggregate %q is already defined at %s:%d:%d; aggregate names must be unique across all mapping files",
					a.name, prev.at.File, prev.at.Line, prev.at.Column))
				continue
			}
			seen[a.name] = a
			set.aggs = append(set.aggs, a)
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	sort.Slice(set.aggs, func(i, j int) bool { return set.aggs[i].name < set.aggs[j].name })
	return set, nil
}

type loader struct {
	file  string
	errs  ErrorList
	nodes int
}

func (l *loader) add(e *Error) { l.errs = append(l.errs, e) }

func (l *loader) at(n *yaml.Node, path string) pos {
	return pos{File: l.file, Line: n.Line, Column: n.Column, Path: path}
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (l *loader) parseFile(data []byte) []*aggSpec {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			l.add(&Error{File: l.file, Line: 1, Column: 1, Msg: "file is empty; a mapping file starts with `version: 1` and `aggregates:`"})
			return nil
		}
		msg := err.Error()
		e := &Error{File: l.file, Msg: "invalid YAML: " + strings.TrimPrefix(msg, "yaml: ")}
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			e.Line, _ = strconv.Atoi(m[1])
			e.Msg = "invalid YAML: " + m[2]
		}
		l.add(e)
		return nil
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		l.add(&Error{File: l.file, Line: extra.Line, Column: extra.Column, Msg: "a mapping file holds one YAML document; move this one to its own file"})
	} else if !errors.Is(err, io.EOF) {
		l.add(&Error{File: l.file, Msg: "invalid YAML after the first document: " + strings.TrimPrefix(err.Error(), "yaml: ")})
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			l.add(&Error{File: l.file, Line: 1, Column: 1, Msg: "file is empty; a mapping file starts with `version: 1` and `aggregates:`"})
			return nil
		}
		root = root.Content[0]
	}
	top := pos{File: l.file, Line: root.Line, Column: root.Column}
	var (
		version    = -1
		schema     = "public"
		aggsNode   *yaml.Node
		aggsKeyPos pos
	)
	l.mapping(root, top, []string{"version", "schema", "aggregates"}, func(key string, k, v *yaml.Node, p pos) {
		switch key {
		case "version":
			version = 0
			if n, ok := l.int(v, p); ok {
				version = n
				if n != 1 {
					l.add(l.at(v, p.Path).errorf("unsupported version %d; this decant reads version 1", n))
				}
			}
		case "schema":
			if s, ok := l.name(v, p); ok {
				schema = s
			}
		case "aggregates":
			aggsNode, aggsKeyPos = v, p
		}
	})
	if root.Kind != yaml.MappingNode {
		return nil
	}
	if version == -1 {
		l.add(top.errorf("missing `version: 1` at the top of the file"))
	}
	if aggsNode == nil {
		l.add(top.errorf("missing `aggregates:`; define at least one aggregate"))
		return nil
	}
	aggsNode = l.deref(aggsNode)
	if aggsNode.Kind == yaml.MappingNode && len(aggsNode.Content) == 0 {
		l.add(l.at(aggsNode, aggsKeyPos.Path).errorf("no aggregates defined"))
		return nil
	}
	var aggs []*aggSpec
	l.mapping(aggsNode, aggsKeyPos, nil, func(name string, k, v *yaml.Node, p pos) {
		if a := l.aggregate(name, k, v, p, schema); a != nil {
			aggs = append(aggs, a)
		}
	})
	return aggs
}

// deref follows YAML aliases and counts nodes against maxNodes.
func (l *loader) deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	l.nodes++
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return "nothing (null)"
		case "!!int":
			return "a number"
		case "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "an unexpected value"
}

// mapping walks the key/value pairs of n. keys lists the valid keys (nil
// accepts any non-empty name, for maps of names such as aggregates). Unknown
// keys and duplicates are reported.
func (l *loader) mapping(n *yaml.Node, p pos, keys []string, f func(key string, k, v *yaml.Node, p pos)) {
	n = l.deref(n)
	if n.Kind != yaml.MappingNode {
		l.add(l.at(n, p.Path).errorf("expected a mapping of keys, got %s", kindName(n)))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if l.nodes > maxNodes {
			l.add(l.at(n, p.Path).errorf("file too large: more than %d YAML nodes (counting alias expansions)", maxNodes))
			return
		}
		k, v := l.deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			l.add(l.at(k, p.Path).errorf("keys must be plain names, got %s", kindName(k)))
			continue
		}
		if k.Tag == "!!merge" {
			l.add(l.at(k, p.Path).errorf("YAML merge keys (<<) are not supported; write the keys out"))
			continue
		}
		key := k.Value
		kp := l.at(k, p.child(key).Path)
		if key == "" {
			l.add(l.at(k, p.Path).errorf("empty key"))
			continue
		}
		if seen[key] {
			l.add(kp.errorf("%q is given twice", key))
			continue
		}
		seen[key] = true
		if keys != nil && !slices.Contains(keys, key) {
			l.add(kp.errorf("unknown key %q%s", key, suggest(key, keys)))
			continue
		}
		f(key, k, v, kp)
	}
}

func (l *loader) str(n *yaml.Node, p pos) (string, bool) {
	n = l.deref(n)
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		l.add(l.at(n, p.Path).errorf("expected a string, got %s", kindName(n)))
		return "", false
	}
	if n.Tag != "!!str" {
		l.add(l.at(n, p.Path).errorf("expected a string, got %s; quote it: \"%s\"", kindName(n), n.Value))
		return "", false
	}
	return n.Value, true
}

// name is a non-empty string that does not start with "$" (reserved).
func (l *loader) name(n *yaml.Node, p pos) (string, bool) {
	s, ok := l.str(n, p)
	if !ok {
		return "", false
	}
	if strings.TrimSpace(s) == "" {
		l.add(l.at(l.deref(n), p.Path).errorf("must not be empty"))
		return "", false
	}
	return s, true
}

func (l *loader) int(n *yaml.Node, p pos) (int, bool) {
	n = l.deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		if v, err := strconv.Atoi(n.Value); err == nil {
			return v, true
		}
	}
	l.add(l.at(n, p.Path).errorf("expected a whole number, got %s", kindName(n)))
	return 0, false
}

func (l *loader) bool(n *yaml.Node, p pos) (bool, bool) {
	n = l.deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	l.add(l.at(n, p.Path).errorf("expected true or false, got %s", kindName(n)))
	return false, false
}

// names is a column list: one name or a list of distinct names.
func (l *loader) names(n *yaml.Node, p pos) ([]string, []pos, bool) {
	n = l.deref(n)
	if n.Kind == yaml.ScalarNode {
		s, ok := l.name(n, p)
		if !ok {
			return nil, nil, false
		}
		return []string{s}, []pos{l.at(n, p.Path)}, true
	}
	if n.Kind != yaml.SequenceNode {
		l.add(l.at(n, p.Path).errorf("expected a column name or a list of column names, got %s", kindName(n)))
		return nil, nil, false
	}
	var (
		out []string
		at  []pos
		ok  = true
	)
	for i, item := range n.Content {
		ip := p.child(strconv.Itoa(i))
		s, good := l.name(item, ip)
		if !good {
			ok = false
			continue
		}
		item = l.deref(item)
		if slices.Contains(out, s) {
			l.add(l.at(item, ip.Path).errorf("column %q is listed twice", s))
			ok = false
			continue
		}
		out = append(out, s)
		at = append(at, l.at(item, ip.Path))
	}
	return out, at, ok
}

// key is a non-empty names list (id, foreign_key, references).
func (l *loader) key(n *yaml.Node, p pos) ([]string, bool) {
	cols, _, ok := l.names(n, p)
	if ok && len(cols) == 0 {
		l.add(l.at(l.deref(n), p.Path).errorf("needs at least one column"))
		return nil, false
	}
	return cols, ok
}

func (l *loader) aggregate(name string, k, v *yaml.Node, p pos, schema string) *aggSpec {
	a := &aggSpec{name: name, at: p}
	if !aggregateNameRE.MatchString(name) || len(name) > 100 {
		l.add(p.errorf("aggregate name %q is not valid: it names Kafka topics and the Elasticsearch index, so use lower-case letters, digits, '_' and '-', starting with a letter or '_'", name))
	}
	a.root = &relSpec{name: name, at: p, tableKeys: tableKeys{schema: schema}}
	keys := []string{"table", "schema", "id", "columns", "rename", "fields", "relations", "where", "elasticsearch"}
	l.mapping(v, p, keys, func(key string, k, v *yaml.Node, kp pos) {
		switch key {
		case "id":
			a.id, _ = l.key(v, kp)
			a.idAt = l.at(l.deref(v), kp.Path)
		case "elasticsearch":
			l.elasticsearch(a, v, kp)
		default:
			l.relField(a.root, key, v, kp, schema, 0)
		}
	})
	if l.deref(v).Kind == yaml.MappingNode {
		l.finishRel(a.root, true)
	}
	return a
}

func (l *loader) elasticsearch(a *aggSpec, v *yaml.Node, p pos) {
	l.mapping(v, p, []string{"index", "settings", "mappings"}, func(key string, k, v *yaml.Node, kp pos) {
		switch key {
		case "index":
			s, ok := l.name(v, kp)
			if ok {
				if bad := invalidIndexName(s); bad != "" {
					l.add(l.at(l.deref(v), kp.Path).errorf("index name %q is not valid in Elasticsearch: %s", s, bad))
				}
				a.index = s
			}
		case "settings", "mappings":
			n := l.deref(v)
			if n.Kind != yaml.MappingNode {
				l.add(l.at(n, kp.Path).errorf("expected a mapping, got %s", kindName(n)))
				return
			}
			var m map[string]any
			if err := n.Decode(&m); err != nil {
				l.add(l.at(n, kp.Path).errorf("cannot read: %v", err))
				return
			}
			if key == "settings" {
				a.settings = m
			} else {
				a.mappings = m
			}
		}
	})
}

func invalidIndexName(s string) string {
	switch {
	case strings.ToLower(s) != s:
		return "it must be lower-case"
	case strings.ContainsAny(s, `\/*?"<>| ,#:`):
		return `it must not contain \ / * ? " < > | , # : or spaces`
	case strings.HasPrefix(s, "-") || strings.HasPrefix(s, "_") || strings.HasPrefix(s, "+"):
		return "it must not start with -, _ or +"
	case s == "." || s == "..":
		return "it must not be . or .."
	case len(s) > 255:
		return "it is longer than 255 bytes"
	}
	return ""
}

var relationKeys = []string{"table", "schema", "foreign_key", "references", "through", "single", "value", "columns", "rename", "fields", "order_by", "where", "relations"}

func (l *loader) relation(name string, v *yaml.Node, p pos, schema string, depth int) *relSpec {
	r := &relSpec{name: name, at: p, tableKeys: tableKeys{schema: schema}}
	if strings.HasPrefix(name, "$") {
		l.add(p.errorf("relation name %q must not start with \"$\" (reserved)", name))
	}
	l.mapping(v, p, relationKeys, func(key string, k, v *yaml.Node, kp pos) {
		l.relField(r, key, v, kp, schema, depth)
	})
	if l.deref(v).Kind == yaml.MappingNode {
		l.finishRel(r, false)
	}
	return r
}

// relField reads one key shared by the root and relations.
func (l *loader) relField(r *relSpec, key string, v *yaml.Node, kp pos, schema string, depth int) {
	vn := l.deref(v)
	vp := l.at(vn, kp.Path)
	switch key {
	case "table", "schema", "foreign_key", "references":
		l.tableKey(&r.tableKeys, key, v, kp, vp)
	case "through":
		l.through(r, v, kp, schema)
	case "single":
		r.single, _ = l.bool(v, kp)
		r.singleAt = kp
	case "value":
		if s, ok := l.name(v, kp); ok {
			r.value = s
			r.valueAt = vp
		}
	case "columns":
		r.columnsSet = true
		r.columns, r.columnAt, _ = l.names(v, kp)
	case "rename":
		r.rename = map[string]string{}
		r.renameAt = map[string]pos{}
		l.mapping(v, kp, nil, func(col string, k, v *yaml.Node, cp pos) {
			if to, ok := l.name(v, cp); ok {
				if strings.HasPrefix(to, "$") {
					l.add(l.at(l.deref(v), cp.Path).errorf("key %q must not start with \"$\" (reserved)", to))
					return
				}
				r.rename[col] = to
				r.renameAt[col] = cp
				r.renameKeys = append(r.renameKeys, col)
			}
		})
	case "order_by":
		r.orderBy = l.orderBy(v, kp)
	case "fields":
		l.mapping(v, kp, nil, func(name string, k, v *yaml.Node, fp pos) {
			if f, ok := l.field(name, v, fp); ok {
				r.fields = append(r.fields, f)
			}
		})
	case "where":
		if s, ok := l.str(v, kp); ok {
			if strings.TrimSpace(s) == "" {
				l.add(vp.errorf("where is empty: write a SQL boolean over the table's columns, e.g. deleted_at IS NULL, or leave the key out"))
				return
			}
			if strings.Contains(s, ";") {
				l.add(vp.errorf("where must be one SQL expression: remove the ';'"))
				return
			}
			r.where, r.whereAt = s, vp
		}
	case "relations":
		if depth+1 > maxDepth {
			l.add(kp.errorf("relations nest deeper than %d levels; is a subtree repeating itself through YAML aliases?", maxDepth))
			return
		}
		l.mapping(v, kp, nil, func(name string, k, v *yaml.Node, rp pos) {
			r.relations = append(r.relations, l.relation(name, v, rp, schema, depth+1))
		})
	}
}

// aggregateFuncs are the functions fields: may apply to a relation.
var aggregateFuncs = []string{"count", "max", "min", "sum", "avg"}

// field reads one computed key: `name: <SQL expression>` or
// `name: {count: relation}` / `name: {max: relation.column}` (min, sum, avg).
func (l *loader) field(name string, v *yaml.Node, p pos) (fieldSpec, bool) {
	f := fieldSpec{name: name, at: p}
	if strings.HasPrefix(name, "$") {
		l.add(p.errorf("key %q must not start with \"$\" (reserved)", name))
		return f, false
	}
	vn := l.deref(v)
	vp := l.at(vn, p.Path)
	if vn.Kind == yaml.ScalarNode {
		s, ok := l.str(v, p)
		if !ok {
			return f, false
		}
		switch {
		case strings.TrimSpace(s) == "":
			l.add(vp.errorf("the expression is empty: write a SQL expression over the table's columns, e.g. first_name || ' ' || last_name"))
			return f, false
		case strings.Contains(s, ";"):
			l.add(vp.errorf("a field must be one SQL expression: remove the ';'"))
			return f, false
		}
		f.expr, f.at = s, vp
		return f, true
	}
	if vn.Kind != yaml.MappingNode || len(vn.Content) != 2 {
		l.add(vp.errorf("expected a SQL expression, or one of %s with a relation, e.g. {count: orders} or {max: orders.placed_at}", strings.Join(aggregateFuncs, ", ")))
		return f, false
	}
	fn, arg := vn.Content[0].Value, l.deref(vn.Content[1])
	fp := l.at(vn.Content[0], p.Path+"."+fn)
	if !slices.Contains(aggregateFuncs, fn) {
		l.add(fp.errorf("unknown function %q: use one of %s%s", fn, strings.Join(aggregateFuncs, ", "), suggest(fn, aggregateFuncs)))
		return f, false
	}
	s, ok := l.name(arg, fp)
	if !ok {
		return f, false
	}
	rel, col, dotted := strings.Cut(s, ".")
	switch {
	case fn == "count" && dotted:
		l.add(l.at(arg, fp.Path).errorf("count takes a relation, not a column: {count: %s}", rel))
		return f, false
	case fn != "count" && !dotted:
		l.add(l.at(arg, fp.Path).errorf("%s takes a relation's column: {%s: %s.<column>}", fn, fn, rel))
		return f, false
	}
	f.fn, f.relation, f.column, f.at = fn, rel, col, l.at(arg, fp.Path)
	return f, true
}

func (l *loader) through(r *relSpec, v *yaml.Node, p pos, schema string) {
	t := &throughSpec{at: p, tableKeys: tableKeys{schema: schema}}
	r.through = t
	l.mapping(v, p, []string{"table", "schema", "foreign_key", "references"}, func(key string, k, v *yaml.Node, kp pos) {
		l.tableKey(&t.tableKeys, key, v, kp, l.at(l.deref(v), kp.Path))
	})
	if l.deref(v).Kind != yaml.MappingNode {
		return
	}
	if t.table == "" {
		l.add(p.errorf("through needs `table:`, the join table"))
	}
	if t.foreignKey == nil {
		l.add(p.errorf("through needs `foreign_key:`, the join table's columns that point at the parent row"))
	}
	if t.references == nil {
		l.add(p.errorf("through needs `references:`, the join table's columns that point at the %s rows", orDefault(r.table, "related")))
	}
	if !t.schemaSet {
		t.schema, t.table = splitTable(t.schema, t.table)
	}
}

// tableKey reads one of the keys in tableKeys; vp is where its value is.
func (l *loader) tableKey(t *tableKeys, key string, v *yaml.Node, kp, vp pos) {
	switch key {
	case "table":
		if s, ok := l.name(v, kp); ok {
			t.table, t.tableAt = s, vp
		}
	case "schema":
		if s, ok := l.name(v, kp); ok {
			t.schema, t.schemaSet = s, true
		}
	case "foreign_key":
		t.foreignKey, _ = l.key(v, kp)
		t.fkAt = vp
	case "references":
		t.references, _ = l.key(v, kp)
		t.refAt = vp
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// splitTable reads "schema.table" in table; callers use it only when no
// schema key was given next to the table.
func splitTable(schema, table string) (string, string) {
	if i := strings.IndexByte(table, '.'); i > 0 && i < len(table)-1 {
		return table[:i], table[i+1:]
	}
	return schema, table
}

var orderWordRE = regexp.MustCompile(`\s+`)

func (l *loader) orderBy(v *yaml.Node, p pos) []orderSpec {
	n := l.deref(v)
	var items []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		items = []*yaml.Node{n}
	case yaml.SequenceNode:
		items = n.Content
	default:
		l.add(l.at(n, p.Path).errorf("expected `column [asc|desc]`, or a list of them, got %s", kindName(n)))
		return nil
	}
	var out []orderSpec
	for i, item := range items {
		ip := p
		if n.Kind == yaml.SequenceNode {
			ip = p.child(strconv.Itoa(i))
		}
		s, ok := l.name(item, ip)
		if !ok {
			continue
		}
		at := l.at(l.deref(item), ip.Path)
		for _, part := range strings.Split(s, ",") {
			words := orderWordRE.Split(strings.TrimSpace(part), -1)
			o := orderSpec{column: words[0], at: at}
			bad := o.column == ""
			rest := words[1:]
			if len(rest) > 0 {
				switch strings.ToLower(rest[0]) {
				case "asc":
					rest = rest[1:]
				case "desc":
					o.desc = true
					rest = rest[1:]
				}
			}
			if len(rest) == 2 && strings.EqualFold(rest[0], "nulls") {
				switch strings.ToLower(rest[1]) {
				case "first", "last":
					o.nulls = strings.ToLower(rest[1])
					rest = nil
				}
			}
			if bad || len(rest) > 0 {
				l.add(at.errorf("cannot read order_by %q: write `column [asc|desc] [nulls first|last]`, several separated by commas", strings.TrimSpace(part)))
				continue
			}
			out = append(out, o)
		}
	}
	return out
}

// finishRel checks the combinations of keys of one relation (or the root).
func (l *loader) finishRel(r *relSpec, root bool) {
	if r.table == "" {
		l.add(r.at.errorf("missing `table:`, the table this %s reads", map[bool]string{true: "aggregate", false: "relation"}[root]))
	}
	if !r.schemaSet {
		r.schema, r.table = splitTable(r.schema, r.table)
	}
	for _, c := range r.renameKeys {
		if r.columnsSet && !slices.Contains(r.columns, c) {
			l.add(r.renameAt[c].errorf("rename of %q, which is not in columns%s", c, suggest(c, r.columns)))
		}
	}
	if root {
		return
	}
	joins := 0
	for _, set := range []bool{r.foreignKey != nil, r.references != nil, r.through != nil} {
		if set {
			joins++
		}
	}
	switch {
	case joins == 0:
		l.add(r.at.errorf("relation %q does not say how to join: add foreign_key (the %s rows point at the parent: one-to-many), references (the parent row points at one %s row: many-to-one) or through (a join table: many-to-many)",
			r.name, orDefault(r.table, "related"), orDefault(r.table, "related")))
	case joins > 1:
		var given []string
		if r.foreignKey != nil {
			given = append(given, "foreign_key")
		}
		if r.references != nil {
			given = append(given, "references")
		}
		if r.through != nil {
			given = append(given, "through")
		}
		l.add(r.at.errorf("ambiguous join: %s are given; keep one (foreign_key: child points at parent, references: parent points at child, through: join table)", strings.Join(given, " and ")))
	}
	if r.singleAt.Line > 0 && r.foreignKey == nil && joins == 1 {
		l.add(r.singleAt.errorf("single applies to foreign_key relations only: references always gives one object and through always gives an array"))
	}
	if r.orderBy != nil && r.references != nil && joins == 1 {
		l.add(r.orderBy[0].at.errorf("order_by has no effect on a references relation, which gives one object; remove it"))
	}
	if r.value != "" {
		if r.relations != nil {
			l.add(r.valueAt.errorf("value gives scalars, so this relation cannot have relations; remove value or relations"))
		}
		if r.columnsSet {
			l.add(r.valueAt.errorf("value and columns are exclusive: value gives one column's values, columns gives objects"))
		}
		if r.rename != nil {
			l.add(r.valueAt.errorf("value gives scalars, so rename has no effect; remove it"))
		}
	}
}
