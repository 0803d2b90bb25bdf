package streamer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/decant-cdc/decant/wire"
)

// spool holds one in-progress transaction that PostgreSQL streams before
// it commits (protocol 2, streaming on). Entries go to a temporary file,
// not memory, so a transaction of any size costs a fixed buffer; at commit
// they are replayed in order, at abort the file is removed. A
// subtransaction's abort marks its xid; its entries are skipped on replay
// (they all precede the abort, and the xid is never reused within the
// transaction).
//
// An entry is either a pgoutput message as received (spoolMessage), decoded
// at commit, or a row change already encoded while the transaction
// streamed (spoolRecord, see encodedRecord), so that the commit has only
// the commit's fields to add before producing.
type spool struct {
	xid     uint32
	file    *os.File
	w       *bufio.Writer
	n       int // entries written
	aborted map[uint32]bool
	// versions are the relations this transaction's rows were encoded
	// with, one per relation message it sent that streamRelation trusted;
	// rels maps a relation id to its current version, or -1 when its rows
	// are spooled as messages.
	versions []*relation
	rels     map[uint32]int
}

// relation returns the relation rows of id are encoded with now, if any.
func (s *spool) relation(id uint32) *relation {
	if v, ok := s.rels[id]; ok && v >= 0 {
		return s.versions[v]
	}
	return nil
}

// Spool entry kinds.
const (
	spoolMessage = 'M'
	spoolRecord  = 'R'
)

// spoolHeader is the size of one entry's header: kind (1) + WAL start (8)
// + length (4).
const spoolHeader = 13

// spoolSpare is room left after each replayed entry, so the commit's fields
// can be appended to an encoded record without another allocation.
const spoolSpare = 128

func newSpool(dir string, xid uint32) (*spool, error) {
	f, err := os.CreateTemp(dir, fmt.Sprintf("decant-txn-%d-*.spool", xid))
	if err != nil {
		return nil, fmt.Errorf("spool of streamed transaction %d: %w (set TMPDIR to a writable directory with room for the largest transaction)", xid, err)
	}
	// Unlinked at once: the file disappears with the process, even on kill -9.
	_ = os.Remove(f.Name())
	return &spool{xid: xid, file: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

// add appends one entry of the given kind with the WAL position it came at.
func (s *spool) add(kind byte, walStart uint64, data []byte) error {
	var h [spoolHeader]byte
	h[0] = kind
	binary.BigEndian.PutUint64(h[1:9], walStart)
	binary.BigEndian.PutUint32(h[9:], uint32(len(data)))
	if _, err := s.w.Write(h[:]); err != nil {
		return s.writeErr(err)
	}
	if _, err := s.w.Write(data); err != nil {
		return s.writeErr(err)
	}
	s.n++
	return nil
}

func (s *spool) writeErr(err error) error {
	return fmt.Errorf("spool of streamed transaction %d: %w (is the temporary directory full? set TMPDIR)", s.xid, err)
}

// abortSub records the abort of a subtransaction.
func (s *spool) abortSub(subxid uint32) {
	if s.aborted == nil {
		s.aborted = map[uint32]bool{}
	}
	s.aborted[subxid] = true
}

// replay calls fn for every entry in the order they were added. The data
// slice passed to fn is fresh for each entry, with spoolSpare bytes of
// capacity after it.
func (s *spool) replay(fn func(kind byte, walStart uint64, data []byte) error) error {
	if err := s.w.Flush(); err != nil {
		return s.writeErr(err)
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return s.writeErr(err)
	}
	r := bufio.NewReaderSize(s.file, 256<<10)
	var h [spoolHeader]byte
	for i := 0; i < s.n; i++ {
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return fmt.Errorf("spool of streamed transaction %d: read entry %d of %d: %w", s.xid, i+1, s.n, err)
		}
		n := binary.BigEndian.Uint32(h[9:])
		data := make([]byte, n, int(n)+spoolSpare)
		if _, err := io.ReadFull(r, data); err != nil {
			return fmt.Errorf("spool of streamed transaction %d: read entry %d of %d: %w", s.xid, i+1, s.n, err)
		}
		if err := fn(h[0], binary.BigEndian.Uint64(h[1:9]), data); err != nil {
			return err
		}
	}
	return nil
}

// close releases the file.
func (s *spool) close() error { return s.file.Close() }

// encodedRecord is a spoolRecord: one record of a row change, encoded while
// its transaction streamed. head is the value up to the change's own LSN
// (encoder.event with txnInfo.headOnly); the commit appends the rest.
type encodedRecord struct {
	xid     uint32  // the (sub)transaction that made the change
	version uint32  // of the relation: an index into spool.versions
	op      wire.Op // of the record (an update of the key makes d, d, c)
	count   wire.Op // of the change, on its first record only: the rows metric
	tomb    bool    // a tombstone: no value
	key     []byte
	head    []byte
}

// encodedRecordHeader: xid (4) + relation version (4) + op (1) + count (1) +
// tombstone (1) + key length (4).
const encodedRecordHeader = 15

// addRecord spools one encoded record; scratch is reused for its bytes
// and returned.
func (s *spool) addRecord(walStart uint64, r encodedRecord, scratch []byte) ([]byte, error) {
	b := appendEncodedRecord(scratch[:0], r)
	return b, s.add(spoolRecord, walStart, b)
}

// appendEncodedRecord appends r as parseEncodedRecord reads it.
func appendEncodedRecord(b []byte, r encodedRecord) []byte {
	b = binary.BigEndian.AppendUint32(b, r.xid)
	b = binary.BigEndian.AppendUint32(b, r.version)
	count, tomb := byte(0), byte(0)
	if r.count != "" {
		count = r.count[0]
	}
	if r.tomb {
		tomb = 1
	}
	b = append(b, r.op[0], count, tomb)
	b = binary.BigEndian.AppendUint32(b, uint32(len(r.key)))
	return append(append(b, r.key...), r.head...)
}

// parseEncodedRecord is appendEncodedRecord's inverse; key and head are slices of data.
func parseEncodedRecord(data []byte) (encodedRecord, error) {
	if len(data) < encodedRecordHeader {
		return encodedRecord{}, errShort
	}
	r := encodedRecord{
		xid:     binary.BigEndian.Uint32(data),
		version: binary.BigEndian.Uint32(data[4:]),
		op:      wire.Op(data[8:9]),
		tomb:    data[10] == 1,
	}
	if data[9] != 0 {
		r.count = wire.Op(data[9:10])
	}
	kl := binary.BigEndian.Uint32(data[11:])
	if uint64(kl) > uint64(len(data)-encodedRecordHeader) {
		return encodedRecord{}, errShort
	}
	r.key = data[encodedRecordHeader : encodedRecordHeader+kl : encodedRecordHeader+kl]
	r.head = data[encodedRecordHeader+kl:]
	return r, nil
}
