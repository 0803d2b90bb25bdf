package streamer

import (
	"context"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The walsender flushes every pgoutput message as it is decoded, so a
// reader that keeps up gets one message of ~100 bytes per read: a million
// read system calls for a million rows, about a third of the streamer's CPU
// in BenchmarkStreamVsRecvlogical, taken from the walsender and the broker
// on a small machine. After a small read the replication connection waits
// a moment before the next one, so the messages sent meanwhile come in one
// read. A message is late by at most coalesceWait.
const (
	coalesceBelow = 2048 // bytes: a read smaller than this is "small"
	coalesceWait  = time.Millisecond
)

// coalescingConn is a net.Conn whose Read waits coalesceWait after a
// small read.
type coalescingConn struct {
	net.Conn
	small bool
}

func (c *coalescingConn) Read(p []byte) (int, error) {
	if c.small {
		time.Sleep(coalesceWait)
	}
	n, err := c.Conn.Read(p)
	c.small = n < coalesceBelow
	return n, err
}

// coalesceReads makes cfg's connections coalescingConns.
func coalesceReads(cfg *pgconn.Config) {
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &coalescingConn{Conn: c}, nil
	}
}
