package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Error is one problem in a config file, with its position.
type Error struct {
	File         string
	Line, Column int // 0 when the problem is not at one place (env, missing key)
	Key          string
	Msg          string
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d:%d: %s: %s", e.File, e.Line, e.Column, e.Key, e.Msg)
	}
	return fmt.Sprintf("%s: %s: %s", e.File, e.Key, e.Msg)
}

// Load reads path (may be "" for defaults and env only), applies environment
// overrides from env (usually os.Environ()), and validates. The returned
// error joins every problem found.
func Load(path string, env []string) (*Config, error) {
	cfg := Default()
	positions := map[string][2]int{} // key path → line, column of its value
	name := path
	if path == "" {
		name = "<defaults>"
		cfg.Dir = "."
	} else {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config: %w (pass --config or create decant.yaml; see docs/configuration.md)", err)
		}
		cfg.Dir = filepath.Dir(path)
		if errs := parse(name, data, &cfg, positions); len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
	}
	var errs []error
	errs = append(errs, applyEnv(&cfg, env)...)
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == cfg.Streamer.HashSaltEnv && k != "" {
			cfg.Streamer.HashSalt = v
		}
	}
	for _, e := range cfg.validate() {
		// Point at the value in the file when it came from there.
		e.File = name
		if p, ok := positions[e.Key]; ok {
			e.Line, e.Column = p[0], p[1]
		}
		errs = append(errs, e)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &cfg, nil
}

// Parse decodes YAML data onto cfg strictly. It returns every error found.
func Parse(file string, data []byte, cfg *Config) []error {
	return parse(file, data, cfg, map[string][2]int{})
}

func parse(file string, data []byte, cfg *Config, positions map[string][2]int) []error {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return []error{fmt.Errorf("%s: %w", file, err)}
	}
	if len(root.Content) == 0 {
		return nil
	}
	d := decoder{file: file, pos: positions}
	d.decode(root.Content[0], reflect.ValueOf(cfg).Elem(), "")
	return d.errs
}

type decoder struct {
	file string
	errs []error
	pos  map[string][2]int
}

func (d *decoder) fail(n *yaml.Node, key, format string, a ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Key: key, Msg: fmt.Sprintf(format, a...)})
}

var durationType = reflect.TypeOf(time.Duration(0))

func (d *decoder) decode(n *yaml.Node, v reflect.Value, key string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if key == "" {
		key = "(top level)"
	}
	d.pos[key] = [2]int{n.Line, n.Column}
	if i := strings.IndexByte(key, '['); i > 0 { // list items point their list's errors at the first bad item
		if _, ok := d.pos[key[:i]]; !ok {
			d.pos[key[:i]] = [2]int{n.Line, n.Column}
		}
	}
	switch {
	case v.Type() == durationType:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, key, "want a duration like 10s or 500ms")
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			d.fail(n, key, "%q is not a duration: write it like 10s, 500ms or 2m", n.Value)
			return
		}
		v.SetInt(int64(dur))
	case v.Kind() == reflect.Struct:
		if n.Kind != yaml.MappingNode {
			d.fail(n, key, "want a mapping (key: value lines), got %s", kindName(n))
			return
		}
		fields := structFields(v.Type())
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			sub := strings.TrimPrefix(key+"."+k.Value, "(top level).")
			idx, ok := fields[k.Value]
			if !ok {
				names := make([]string, 0, len(fields))
				for f := range fields {
					names = append(names, f)
				}
				d.fail(k, sub, "unknown key%s", suggest(k.Value, names))
				continue
			}
			if seen[k.Value] {
				d.fail(k, sub, "duplicate key: remove one of them")
				continue
			}
			seen[k.Value] = true
			d.decode(val, v.Field(idx), sub)
		}
	case v.Kind() == reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(n, key, "want a mapping (key: value lines), got %s", kindName(n))
			return
		}
		m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			sub := key + "." + k.Value
			if m.MapIndex(reflect.ValueOf(k.Value)).IsValid() {
				d.fail(k, sub, "duplicate key: remove one of them")
				continue
			}
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, elem, sub)
			m.SetMapIndex(reflect.ValueOf(k.Value), elem)
		}
		v.Set(m)
	case v.Kind() == reflect.Slice:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.fail(n, key, "want a list, e.g. [a, b], got %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", key, i))
		}
		v.Set(s)
	default:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, key, "want a single %s value, got %s", v.Kind(), kindName(n))
			return
		}
		if err := setScalar(v, n.Value, n.Tag); err != nil {
			d.fail(n, key, "%v", err)
		}
	}
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return fmt.Sprintf("%q", n.Value)
	}
}

func setScalar(v reflect.Value, s, tag string) error {
	switch v.Kind() {
	case reflect.String:
		if tag == "!!null" {
			v.SetString("")
			return nil
		}
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return fmt.Errorf("%q is not a boolean: write true or false", s)
		}
		v.SetBool(b)
	case reflect.Int:
		i, err := strconv.Atoi(s)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", s)
		}
		v.SetInt(int64(i))
	default:
		return fmt.Errorf("unsupported type %s", v.Type())
	}
	return nil
}

// structFields maps yaml tag → field index.
func structFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("yaml")
		if tag == "" || tag == "-" {
			continue
		}
		m[tag] = i
	}
	return m
}

// applyEnv sets fields from DECANT_<PATH> variables.
func applyEnv(cfg *Config, env []string) []error {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(k, "DECANT_") {
			vars[k] = v
		}
	}
	var errs []error
	known := map[string]bool{}
	var walk func(v reflect.Value, prefix, key string)
	walk = func(v reflect.Value, prefix, key string) {
		if v.Kind() == reflect.Struct && v.Type() != durationType {
			t := v.Type()
			for i := 0; i < t.NumField(); i++ {
				tag := t.Field(i).Tag.Get("yaml")
				if tag == "" || tag == "-" {
					continue
				}
				k := tag
				if key != "" {
					k = key + "." + tag
				}
				walk(v.Field(i), prefix+"_"+strings.ToUpper(tag), k)
			}
			return
		}
		if v.Kind() == reflect.Map {
			return // set in the file only
		}
		known[prefix] = true
		s, ok := vars[prefix]
		if !ok {
			return
		}
		var err error
		switch {
		case v.Type() == durationType:
			var dur time.Duration
			if dur, err = time.ParseDuration(s); err == nil {
				v.SetInt(int64(dur))
			} else {
				err = fmt.Errorf("%q is not a duration like 10s", s)
			}
		case v.Kind() == reflect.Slice:
			var items []string
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					items = append(items, p)
				}
			}
			v.Set(reflect.ValueOf(items))
		default:
			err = setScalar(v, s, "")
		}
		if err != nil {
			errs = append(errs, &Error{File: "environment", Key: prefix + " (" + key + ")", Msg: err.Error()})
		}
	}
	walk(reflect.ValueOf(cfg).Elem(), "DECANT", "")
	var unknown []string
	for k := range vars {
		if !known[k] && !ignoredEnv[k] && !strings.HasPrefix(k, "DECANT_TEST_") && !strings.HasPrefix(k, "DECANT_BENCH_") && !strings.HasPrefix(k, "DECANT_CHAOS_") {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for _, k := range unknown {
		names := make([]string, 0, len(known))
		for n := range known {
			names = append(names, n)
		}
		errs = append(errs, &Error{File: "environment", Key: k, Msg: "unknown variable" + suggest(k, names)})
	}
	return errs
}

// ignoredEnv are DECANT_ variables used by scripts, not by the config.
var ignoredEnv = map[string]bool{
	"DECANT_CONFIG": true, "DECANT_INFRA_DIR": true, "DECANT_CACHE_DIR": true,
	"DECANT_PG_PORT": true, "DECANT_KAFKA_PORT": true, "DECANT_KAFKA_CONTROLLER_PORT": true,
	"DECANT_ES_PORT": true, "DECANT_ES_TRANSPORT_PORT": true, "DECANT_WAIT_SECS": true, "DECANT_ES_HEAP": true,
	"DECANT_HEAVY": true, "DECANT_JAVA": true, "DECANT_KAFKA_HEAP": true, "DECANT_ES_CDS": true,
	"DECANT_HASH_SALT":  true, // streamer.hash_salt_env's default: a secret, not a setting
	"DECANT_PG_VERSION": true, "DECANT_PG_STANDBY_PORT": true, "DECANT_PG16_RELEASE": true, "DECANT_PG17_RELEASE": true, "DECANT_PG18_RELEASE": true,
}

// suggest returns `; did you mean "x"?` for the closest name (Closest),
// else the valid keys when there are at most 12, else "".
func suggest(got string, names []string) string {
	if best, ok := Closest(got, names, false); ok {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	if len(names) > 0 && len(names) <= 12 {
		sort.Strings(names)
		return "; valid keys: " + strings.Join(names, ", ")
	}
	return ""
}

// Closest is decant's one rule for "did you mean": the name nearest to got
// by edit distance, ignoring case, when it is within max(2, len(got)/3)
// edits. With prefixes, a name that starts with got (3 characters or
// more) counts as one edit away. config and mappings both use it.
func Closest(got string, names []string, prefixes bool) (string, bool) {
	best, bestD := "", 1<<30
	lower := strings.ToLower(got)
	for _, n := range names {
		d := levenshtein(lower, strings.ToLower(n))
		if prefixes && len(got) >= 3 && strings.HasPrefix(strings.ToLower(n), lower) {
			d = min(d, 1)
		}
		if d < bestD {
			best, bestD = n, d
		}
	}
	return best, best != "" && bestD <= max(2, len(got)/3)
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
