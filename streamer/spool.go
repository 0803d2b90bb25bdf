package streamer

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// spool holds the pgoutput messages of one in-progress transaction that
// PostgreSQL streams before it commits (protocol 2, streaming on). Messages
// go to a temporary file, not memory, so a transaction of any size costs a
// fixed buffer; at commit they are replayed in order, at abort the file is
// removed. A subtransaction's abort marks its xid; its messages are skipped
// on replay (they all precede the abort, and the xid is never reused within
// the transaction).
type spool struct {
	xid     uint32
	file    *os.File
	w       *bufio.Writer
	n       int // messages written
	aborted map[uint32]bool
}

// spoolHeader is the size of one entry's header: WAL start (8) + length (4).
const spoolHeader = 12

func newSpool(dir string, xid uint32) (*spool, error) {
	f, err := os.CreateTemp(dir, fmt.Sprintf("decant-txn-%d-*.spool", xid))
	if err != nil {
		return nil, fmt.Errorf("spool of streamed transaction %d: %w (set TMPDIR to a writable directory with room for the largest transaction)", xid, err)
	}
	// Unlinked at once: the file disappears with the process, even on kill -9.
	_ = os.Remove(f.Name())
	return &spool{xid: xid, file: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

// add appends one message, as received, with the WAL position it came at.
func (s *spool) add(walStart uint64, data []byte) error {
	var h [spoolHeader]byte
	binary.BigEndian.PutUint64(h[:8], walStart)
	binary.BigEndian.PutUint32(h[8:], uint32(len(data)))
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

// replay calls fn for every message in the order they were added. The data
// slice passed to fn is fresh for each message.
func (s *spool) replay(fn func(walStart uint64, data []byte) error) error {
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
		data := make([]byte, binary.BigEndian.Uint32(h[8:]))
		if _, err := io.ReadFull(r, data); err != nil {
			return fmt.Errorf("spool of streamed transaction %d: read entry %d of %d: %w", s.xid, i+1, s.n, err)
		}
		if err := fn(binary.BigEndian.Uint64(h[:8]), data); err != nil {
			return err
		}
	}
	return nil
}

// close releases the file.
func (s *spool) close() error { return s.file.Close() }
