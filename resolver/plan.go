package resolver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/decant-cdc/decant/mappings"
	"github.com/decant-cdc/decant/wire"
)

// This file is the pure core of the map stage: from decoded change events
// to the refs they cause, without I/O. Lookups that need the database are
// collected (lookupBatch) and run by the Mapper.

// image is a decoded before or after image: column name → value encoded as
// to_jsonb encodes it. A nil image means "not available".
type image map[string]json.RawMessage

// decodeImage decodes a before or after image; JSON null or absent gives nil.
func decodeImage(raw json.RawMessage) (image, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var buf [16]wire.FlatMember
	if ms, ok := wire.ScanObject(raw, buf[:]); ok {
		img := make(image, len(ms))
		for _, m := range ms {
			img[string(m.Name)] = m.Value // the last of a repeated name, as encoding/json
		}
		return img, nil
	}
	var img image
	if err := json.Unmarshal(raw, &img); err != nil {
		return nil, fmt.Errorf("image is not a JSON object: %w", err)
	}
	return img, nil
}

// watchChanged reports whether an update changed any of the watched
// columns. A column missing from either image (a before image limited to
// the replica identity, or no before image at all) counts as changed —
// unless it is listed in unchangedToast, which PostgreSQL only does for
// values it knows did not change.
func watchChanged(watch []string, before, after image, unchangedToast []string) bool {
	if before == nil || after == nil {
		return true
	}
	for _, c := range watch {
		if slices.Contains(unchangedToast, c) {
			continue
		}
		b, okb := before[c]
		a, oka := after[c]
		if !okb || !oka || !jsonSame(a, b) {
			return true
		}
	}
	return false
}

// jsonSame compares two encoded values. Both come from the same encoder,
// so equal values have equal bytes; whitespace is tolerated.
func jsonSame(a, b json.RawMessage) bool {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// fromValues returns the values of cols in img, in order. ok is false when
// the image is missing, a column is absent, or a value is null: a row with
// a null link belongs to no document through this route.
func fromValues(cols []string, img image) (vals []json.RawMessage, ok bool) {
	if img == nil {
		return nil, false
	}
	vals = make([]json.RawMessage, len(cols))
	for i, c := range cols {
		v, present := img[c]
		v = bytes.TrimSpace(v)
		if !present || len(v) == 0 || string(v) == "null" {
			return nil, false
		}
		vals[i] = v
	}
	return vals, true
}

// idKey encodes aggregate id values (in id order) as the aggregate's Kafka
// key: {"id":7}, the same bytes as a raw key of the root table.
func idKey(a *mappings.Aggregate, vals []json.RawMessage) []byte {
	fields := make([]wire.KeyField, len(a.ID))
	for i, c := range a.ID {
		fields[i] = wire.KeyField{Name: c, Value: vals[i]}
	}
	return wire.Key(fields)
}

// cause is the change a ref is attributed to, with its WAL position for
// picking the latest of several.
type cause struct {
	lsn uint64 // commit LSN
	seq int64
	ref wire.Ref // Aggregate left empty
}

func causeOf(c *wire.Change) (cause, error) {
	lsn, err := wire.ParseLSN(c.Source.CommitLSN)
	if err != nil {
		return cause{}, fmt.Errorf("table %s.%s: source.commit_lsn: %w", c.Schema, c.Table, err)
	}
	return cause{lsn: lsn, seq: c.Source.Seq, ref: wire.Ref{
		CommitLSN: c.Source.CommitLSN, XID: c.Source.XID, Table: c.Schema + "." + c.Table, Op: c.Op,
	}}, nil
}

func (c cause) after(o cause) bool { return c.lsn > o.lsn || c.lsn == o.lsn && c.seq > o.seq }

// keyedRef is one ref to produce: topic key and value.
type keyedRef struct {
	Aggregate string
	Key       []byte
	Ref       wire.Ref
}

// refSet coalesces refs by (aggregate, key), keeping the latest cause and
// the order in which keys first appeared.
type refSet struct {
	index map[string]int
	refs  []keyedRef
	cause []cause
}

func newRefSet() *refSet { return &refSet{index: map[string]int{}} }

func (s *refSet) add(aggregate string, key []byte, c cause) {
	k := aggregate + "\x00" + string(key)
	if i, ok := s.index[k]; ok {
		if c.after(s.cause[i]) {
			s.cause[i] = c
			s.refs[i].Ref = withAggregate(c.ref, aggregate)
		}
		return
	}
	s.index[k] = len(s.refs)
	s.refs = append(s.refs, keyedRef{Aggregate: aggregate, Key: key, Ref: withAggregate(c.ref, aggregate)})
	s.cause = append(s.cause, c)
}

func (s *refSet) len() int { return len(s.refs) }

func withAggregate(r wire.Ref, aggregate string) wire.Ref {
	r.Aggregate = aggregate
	return r
}

// lookupBatch is the distinct From tuples of one lookup route in a batch,
// attributed to the latest change that fed it.
type lookupBatch struct {
	route  *mappings.Route
	index  map[string]bool
	tuples [][]json.RawMessage
	cause  cause
}

func (l *lookupBatch) add(vals []json.RawMessage, c cause) {
	var k bytes.Buffer
	for _, v := range vals {
		k.Write(v)
		k.WriteByte(0)
	}
	if len(l.tuples) == 0 || c.after(l.cause) {
		l.cause = c
	}
	if l.index[k.String()] {
		return
	}
	l.index[k.String()] = true
	l.tuples = append(l.tuples, vals)
}

// plan is what one batch of changes resolves to before any query runs.
type plan struct {
	direct    *refSet
	lookups   []*lookupBatch // in route order of first use
	truncated []truncation
	changes   int
	skipped   int      // route applications an unchanged update skipped
	xids      []uint32 // transactions that must be visible before lookups run
	// noBefore are the updates and deletes whose before image lacks link
	// columns (see lacksBefore): dead-lettered, as their old documents
	// cannot be found.
	noBefore []noBefore
}

// noBefore is an update or delete whose before image lacks columns that
// routes need to find the documents the row belonged to before the change:
// the table's replica identity was changed from FULL while decant ran
// (decant refuses to start in that state, see mappings.RequireBeforeImages). Its
// after image is still resolved; the old documents may keep the row until
// the aggregate is backfilled.
type noBefore struct {
	change     *wire.Change
	table      mappings.TableName
	columns    []string // needed and absent, in route order
	aggregates []string
}

// lacksBefore returns the columns of cols that the before image of an
// update or delete does not carry. When PostgreSQL sent no before image
// for an update, the key did not change: key columns are then known from
// the after image.
func lacksBefore(ch *wire.Change, before image, cols []string) []string {
	if ch.Op != wire.OpUpdate && ch.Op != wire.OpDelete {
		return nil
	}
	var key image
	var missing []string
	for _, c := range cols {
		if _, ok := before[c]; ok {
			continue
		}
		if before == nil && ch.Op == wire.OpUpdate {
			if key == nil {
				key, _ = decodeImage(ch.Key)
			}
			if _, ok := key[c]; ok {
				continue
			}
		}
		missing = append(missing, c)
	}
	return missing
}

// truncation is one aggregate to rebuild whole because one of its tables
// was truncated.
type truncation struct {
	aggregate *mappings.Aggregate
	root      bool // the root table itself was truncated: also rebuild every id that has a document
	cause     cause
}

// planner resolves decoded changes to refs and lookups. It is pure.
type planner struct {
	model *mappings.Model
	want  func(aggregate string) bool
	// snapshots remembers the (aggregate, snapshot LSN) pairs whose rebuild
	// was already planned: rows of an initial snapshot (op "r") are not
	// resolved one by one — that would build each document once per row of
	// every table in it — but rebuild every document of the aggregates using
	// the table, once per snapshot, like a TRUNCATE does.
	snapshots map[string]bool
	// planned is the last (table, snapshot LSN) snapshotPlanned said yes
	// to: a snapshot's rows come table by table, so most rows ask the
	// same. It holds until forget, as snapshots does.
	planned struct {
		table mappings.TableName
		lsn   string
	}
}

// forget drops the snapshot rebuilds planned so far. A rebuild is planned
// before its refs are produced; when the batch fails, the session that
// planned it ends and the next one must plan it again (otherwise its
// snapshot rows would be skipped and its documents never built).
func (p *planner) forget() {
	p.snapshots = nil
	p.planned.table, p.planned.lsn = mappings.TableName{}, ""
}

// snapshotPlanned says whether the rebuild of every wanted aggregate that
// uses table was already planned for the initial snapshot whose rows carry
// commit LSN lsn: another row of that snapshot resolves to nothing.
func (p *planner) snapshotPlanned(table mappings.TableName, lsn []byte) bool {
	if p.planned.lsn != "" && p.planned.table == table && p.planned.lsn == string(lsn) {
		return true
	}
	routes := p.model.RoutesFor(table)
	if len(routes) == 0 {
		return false
	}
	for _, r := range routes {
		if p.want(r.Aggregate) && !p.snapshots[r.Aggregate+"@"+string(lsn)] {
			return false
		}
	}
	p.planned.table, p.planned.lsn = table, string(lsn)
	return true
}

// plan resolves one batch of changes.
func (p *planner) plan(changes []*wire.Change) (*plan, error) {
	out := &plan{direct: newRefSet()}
	byRoute := map[*mappings.Route]*lookupBatch{}
	truncs := map[string]int{}
	xids := map[uint32]bool{}
	for _, ch := range changes {
		table := mappings.TableName{Schema: ch.Schema, Name: ch.Table}
		routes := p.model.RoutesFor(table)
		if len(routes) == 0 {
			continue
		}
		out.changes++
		c, err := causeOf(ch)
		if err != nil {
			return nil, err
		}
		if ch.Source.XID != 0 && !ch.Source.Snapshot && !xids[ch.Source.XID] {
			xids[ch.Source.XID] = true
			out.xids = append(out.xids, ch.Source.XID)
		}
		switch ch.Op {
		case wire.OpRead:
			p.planSnapshotRead(out, ch, routes, c)
		case wire.OpTruncate:
			p.planTruncate(out, truncs, routes, c)
		default:
			if err := p.planRow(out, byRoute, ch, table, routes, c); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// planSnapshotRead plans a snapshot row: the first row of each snapshot
// (aggregate and the snapshot's source.lsn: an initial snapshot's rows
// all carry its consistent point there, as commit LSN too; the rows of
// an online table snapshot carry the LSN it started at, and each chunk's
// high watermark as commit LSN) plans a rebuild of every document of the
// aggregate (a root truncation); the rows themselves are skipped.
func (p *planner) planSnapshotRead(out *plan, ch *wire.Change, routes []*mappings.Route, c cause) {
	for _, r := range routes {
		if !p.want(r.Aggregate) {
			continue
		}
		k := r.Aggregate + "@" + ch.Source.LSN
		if p.snapshots[k] {
			continue
		}
		if p.snapshots == nil {
			p.snapshots = map[string]bool{}
		}
		p.snapshots[k] = true
		out.truncated = append(out.truncated, truncation{aggregate: p.model.Aggregate(r.Aggregate), root: true, cause: c})
	}
	out.skipped++
}

// planTruncate plans a TRUNCATE: one truncation per aggregate and batch
// (truncs indexes out.truncated by aggregate), with the latest cause.
func (p *planner) planTruncate(out *plan, truncs map[string]int, routes []*mappings.Route, c cause) {
	for _, r := range routes {
		if !p.want(r.Aggregate) {
			continue
		}
		a := p.model.Aggregate(r.Aggregate)
		root := r.Node.Kind == mappings.Root
		if i, ok := truncs[r.Aggregate]; ok {
			out.truncated[i].root = out.truncated[i].root || root
			if c.after(out.truncated[i].cause) {
				out.truncated[i].cause = c
			}
			continue
		}
		truncs[r.Aggregate] = len(out.truncated)
		out.truncated = append(out.truncated, truncation{aggregate: a, root: root, cause: c})
	}
}

// planRow plans an insert, update or delete: a ref for every route whose
// From columns are in the before or after image (direct, or through the
// route's lookup batch in byRoute), and a noBefore when a route needs a
// before image the change lacks.
func (p *planner) planRow(out *plan, byRoute map[*mappings.Route]*lookupBatch, ch *wire.Change, table mappings.TableName, routes []*mappings.Route, c cause) error {
	before, err := decodeImage(ch.Before)
	if err != nil {
		return fmt.Errorf("table %s, lsn %s: before: %w", table, ch.Source.LSN, err)
	}
	after, err := decodeImage(ch.After)
	if err != nil {
		return fmt.Errorf("table %s, lsn %s: after: %w", table, ch.Source.LSN, err)
	}
	var nb *noBefore
	for _, r := range routes {
		if !p.want(r.Aggregate) {
			continue
		}
		if miss := lacksBefore(ch, before, r.From); len(miss) > 0 {
			if nb == nil {
				nb = &noBefore{change: ch, table: table}
			}
			for _, c := range miss {
				if !slices.Contains(nb.columns, c) {
					nb.columns = append(nb.columns, c)
				}
			}
			if !slices.Contains(nb.aggregates, r.Aggregate) {
				nb.aggregates = append(nb.aggregates, r.Aggregate)
			}
		}
		if ch.Op == wire.OpUpdate && !watchChanged(r.Watch, before, after, ch.UnchangedToast) {
			out.skipped++
			continue
		}
		a := p.model.Aggregate(r.Aggregate)
		for _, img := range [2]image{before, after} {
			vals, ok := fromValues(r.From, img)
			if !ok {
				continue
			}
			if r.Lookup == nil {
				out.direct.add(r.Aggregate, idKey(a, vals), c)
				continue
			}
			lb := byRoute[r]
			if lb == nil {
				lb = &lookupBatch{route: r, index: map[string]bool{}}
				byRoute[r] = lb
				out.lookups = append(out.lookups, lb)
			}
			lb.add(vals, c)
		}
	}
	if nb != nil {
		out.noBefore = append(out.noBefore, *nb)
	}
	return nil
}
