package mappings

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A shared relation is a many-to-one inside an array: the product of an
// order line, whose row many lines (of many documents) refer to. Build
// builds its object once per reference, which in the demo is a third of
// what PostgreSQL spends building documents (docs/performance.md,
// thirtieth pass). Batch writes a marker in its place instead, and the
// relation's Shared statement builds each object the batch refers to
// once; SharedSet splices them in.
//
// A marker is markOpen, the Shared index in decimal, markSep, the values
// of the referencing columns as JSON text separated by markSep, then
// markClose. JSON text never holds a raw control character (PostgreSQL's
// JSON output escapes them, and its json input rejects them), so a marker
// cannot be mistaken for a document's content.
const (
	markOpen  = 0x01
	markSep   = 0x02
	markClose = 0x03
)

// Shared builds the objects of one shared relation.
type Shared struct {
	// Node is the many-to-one relation.
	Node *Node
	// Query returns, for a batch of the referencing columns' values
	// (Query.Args, in the parent's column types), one row per value that
	// names a row the relation holds: its 1-based position in the batch
	// (int8), then the object as text, spaced as Build spaces it.
	Query *Query
}

// sharable reports whether n's object can be left to a Shared statement:
// a many-to-one that selects at most one row, referenced by columns whose
// values survive the trip through JSON text and back.
func sharable(n *Node) bool {
	if n.Kind != ManyToOne || !n.unique || n.Parent == nil || n.Parent.table == nil {
		return false
	}
	for _, c := range n.ParentColumns {
		tc := n.Parent.table.Column(c)
		if tc == nil || tc.ElemType != "" {
			return false
		}
		switch {
		case tc.Category == 'N', tc.Category == 'S', tc.Category == 'D', tc.Category == 'B', tc.BaseType == "uuid":
		default:
			return false
		}
	}
	return true
}

// sharedRef returns the marker of n's object in the row at parent, or
// 'null' when a referencing column is NULL (no row matches then, as in
// Build), and adds n's Shared statement.
func (g *sqlGen) sharedRef(n *Node, parent string) string {
	i := len(*g.shared)
	*g.shared = append(*g.shared, sharedQuery(n))
	parts := []string{fmt.Sprintf(`E'\x%02x%d\x%02x'`, markOpen, i, markSep)}
	for j, c := range n.ParentColumns {
		if j > 0 {
			parts = append(parts, fmt.Sprintf(`E'\x%02x'`, markSep))
		}
		v, _ := columnJSON(n.Parent, parent, c) // NULL when the value is: the marker is then 'null'
		parts = append(parts, v)
	}
	parts = append(parts, fmt.Sprintf(`E'\x%02x'`, markClose))
	return "COALESCE(" + strings.Join(parts, " || ") + ", 'null')"
}

// sharedQuery generates the Shared statement of n: Build's object of n,
// joined to the batch of referencing values as Build joins it to the
// parent row.
func sharedQuery(n *Node) *Shared {
	g := &sqlGen{indent: 1}
	alias := g.alias()
	obj := g.object(n, alias)
	types := make([]string, len(n.ParentColumns))
	arrs := make([]string, len(n.ParentColumns))
	names := make([]string, len(n.ParentColumns))
	on := make([]string, len(n.ParentColumns))
	for i, c := range n.ParentColumns {
		types[i] = n.Parent.table.Column(c).BaseType
		arrs[i] = fmt.Sprintf("$%d::text[]::%s[]", i+1, types[i])
		names[i] = "k" + strconv.Itoa(i)
		on[i] = col(alias, n.ChildColumns[i]) + " = k." + names[i]
	}
	sql := fmt.Sprintf("SELECT k.ord,\n  %s AS doc\nFROM unnest(%s) WITH ORDINALITY AS k(%s, ord)\nJOIN %s ON %s",
		obj, strings.Join(arrs, ", "), strings.Join(names, ", "), relationFrom(n, alias), strings.Join(on, " AND "))
	return &Shared{Node: n, Query: &Query{SQL: sql, Params: params(n.ParentColumns, types)}}
}

// marker is one marker in a document: doc[start:end], for Shared ref,
// with the referencing values key (separated by markSep).
type marker struct {
	start, end, ref int
	key             []byte
}

// nextMarker returns the first marker in doc at or after from; start is
// -1 when there is none.
func nextMarker(doc []byte, from int) (marker, error) {
	i := bytes.IndexByte(doc[from:], markOpen)
	if i < 0 {
		return marker{start: -1}, nil
	}
	m := marker{start: from + i}
	body := doc[m.start+1:]
	sep := bytes.IndexByte(body, markSep)
	end := bytes.IndexByte(body, markClose)
	if sep <= 0 || end < sep {
		return m, fmt.Errorf("mappings: malformed shared-object marker at byte %d", m.start)
	}
	ref := 0
	for _, c := range body[:sep] {
		if c < '0' || c > '9' || ref > 1<<20 {
			return m, fmt.Errorf("mappings: malformed shared-object marker at byte %d", m.start)
		}
		ref = ref*10 + int(c-'0')
	}
	m.ref, m.key, m.end = ref, body[sep+1:end], m.start+1+end+1
	return m, nil
}

// SharedSet gathers the shared objects a batch's documents refer to:
// Add each document Batch returned, Fetch once, then AppendSpliced each
// document Add kept. It is not safe for concurrent use. ReuseSharedSet
// empties one for the next batch, keeping its memory.
type SharedSet struct {
	shared []*Shared
	pos    []map[string]int // per Shared: marker key → position in keys
	keys   [][][]json.RawMessage
	objs   [][][]byte // per Shared, per position: the object, nil when no row
	docs   []markedDoc
	slots  []slot // the markers of docs, in order
	copies []byte // the documents Add kept, one after the other
}

// A markedDoc is a document with markers, copies[start:end], and its
// slots.
type markedDoc struct {
	start, end int
	lo, hi     int // slots[lo:hi]
}

// A slot is a marker found by Add: doc[start:end] holds the object at
// position pos of Shared ref. Add parses each marker once, so splicing
// looks nothing up.
type slot struct{ start, end, ref, pos int }

// NewSharedSet returns an empty set for a's shared relations.
func (a *Aggregate) NewSharedSet() *SharedSet { return a.ReuseSharedSet(nil) }

// ReuseSharedSet returns s emptied for a's shared relations, keeping the
// memory its last batch grew (a new set when s is nil). Nothing Add,
// Fetch or AppendSpliced returned may be in use: AppendSpliced copies.
func (a *Aggregate) ReuseSharedSet(s *SharedSet) *SharedSet {
	if s == nil {
		s = &SharedSet{}
	}
	s.shared = a.Shared
	s.docs, s.slots, s.copies = s.docs[:0], s.slots[:0], s.copies[:0]
	n := len(a.Shared)
	for len(s.pos) < n {
		s.pos = append(s.pos, map[string]int{})
	}
	s.pos, s.keys, s.objs = s.pos[:n], slices.Grow(s.keys[:0], n)[:n], slices.Grow(s.objs[:0], n)[:n]
	for i := range n {
		clear(s.pos[i])
		s.keys[i], s.objs[i] = s.keys[i][:0], nil
	}
	return s
}

// Add records the objects doc refers to. When it refers to any, Add keeps
// a copy of doc (doc may be reused after) and returns its index for
// AppendSpliced; otherwise it returns -1.
func (s *SharedSet) Add(doc []byte) (int, error) {
	lo := len(s.slots)
	for from := 0; ; {
		m, err := nextMarker(doc, from)
		if err == nil && m.start >= 0 && (m.ref < 0 || m.ref >= len(s.shared)) {
			err = fmt.Errorf("mappings: marker of shared object %d; the statement has %d", m.ref, len(s.shared))
		}
		if err != nil {
			s.slots = s.slots[:lo]
			return -1, err
		}
		if m.start < 0 {
			break
		}
		from = m.end
		p, ok := s.pos[m.ref][string(m.key)]
		if !ok {
			vals := bytes.Split(m.key, []byte{markSep})
			key := make([]json.RawMessage, len(vals))
			for i, v := range vals {
				key[i] = json.RawMessage(bytes.Clone(v))
			}
			p = len(s.keys[m.ref])
			s.pos[m.ref][string(m.key)] = p
			s.keys[m.ref] = append(s.keys[m.ref], key)
		}
		s.slots = append(s.slots, slot{start: m.start, end: m.end, ref: m.ref, pos: p})
	}
	if len(s.slots) == lo {
		return -1, nil
	}
	s.docs = append(s.docs, markedDoc{start: len(s.copies), end: len(s.copies) + len(doc), lo: lo, hi: len(s.slots)})
	s.copies = append(s.copies, doc...)
	return len(s.docs) - 1, nil
}

// Fetch builds every object added, one statement per shared relation, in
// q: the transaction whose snapshot built the documents.
func (s *SharedSet) Fetch(ctx context.Context, q Querier) error {
	for i, sh := range s.shared {
		keys := s.keys[i]
		if len(keys) == 0 {
			continue
		}
		args, err := sh.Query.Args(keys)
		if err != nil {
			return fmt.Errorf("shared %s: %w", sh.Node.Path, err)
		}
		objs := make([][]byte, len(keys))
		err = each(ctx, q, sh.Query.SQL, func(r pgx.Rows) error {
			var ord int64
			var obj []byte
			if err := r.Scan(&ord, &obj); err != nil {
				return err
			}
			if ord < 1 || int(ord) > len(objs) {
				return fmt.Errorf("position %d out of 1..%d", ord, len(objs))
			}
			objs[ord-1] = obj
			return nil
		}, args...)
		if err != nil {
			return fmt.Errorf("shared %s: %w", sh.Node.Path, err)
		}
		s.objs[i] = objs
	}
	return nil
}

// SplicedLen returns the length of document i with its objects spliced
// in (before appendText, which may only shorten it). Call it after Fetch.
func (s *SharedSet) SplicedLen(i int) int {
	d := s.docs[i]
	n := d.end - d.start
	for _, sl := range s.slots[d.lo:d.hi] {
		n += len(s.object(sl)) - (sl.end - sl.start)
	}
	return n
}

// object returns the object of sl: null when it names no row, as Build's
// COALESCE gives, or when Fetch has not built it (AppendSpliced says so).
func (s *SharedSet) object(sl slot) []byte {
	if objs := s.objs[sl.ref]; objs != nil && objs[sl.pos] != nil {
		return objs[sl.pos]
	}
	return []byte("null")
}

// AppendSpliced appends document i (Add's index) to dst with each marker
// replaced by its object, or null when it names no row. appendText
// appends the text between markers and the objects (wire.AppendCompact
// compacts them); nil appends them as they are.
func (s *SharedSet) AppendSpliced(dst []byte, i int, appendText func(dst, src []byte) []byte) ([]byte, error) {
	if appendText == nil {
		appendText = func(dst, src []byte) []byte { return append(dst, src...) }
	}
	d := s.docs[i]
	doc := s.copies[d.start:d.end]
	from := 0
	for _, sl := range s.slots[d.lo:d.hi] {
		if s.objs[sl.ref] == nil {
			return dst, fmt.Errorf("mappings: shared object %d was not fetched", sl.ref)
		}
		dst = appendText(dst, doc[from:sl.start])
		dst = appendText(dst, s.object(sl))
		from = sl.end
	}
	return appendText(dst, doc[from:]), nil
}

// Keys returns the referencing values added for Shared i, in the order
// Fetch passes them to its statement.
func (s *SharedSet) Keys(i int) [][]json.RawMessage { return s.keys[i] }
