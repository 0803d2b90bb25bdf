package resolver

// fullXID widens a 32-bit transaction id, as carried by raw events and
// refs, to the 64-bit xid8 PostgreSQL's snapshot functions take, using a
// recent snapshot's xmax (pg_snapshot_xmax(pg_current_snapshot())) for the
// epoch. Transaction ids in use are always within 2^31 of each other
// (wraparound protection), so the xid8 is the value closest to xmax whose
// low 32 bits are xid: a committed transaction not yet visible (xid ≥
// xmax) stays in the future instead of wrapping into the past.
func fullXID(xid uint32, xmax uint64) uint64 {
	d := int64(int32(xid - uint32(xmax)))
	v := int64(xmax) + d
	if v < 0 {
		// Older than the first epoch: cannot happen for a live id; treat
		// it as long committed (any snapshot sees it).
		return 3 // FirstNormalTransactionId
	}
	return uint64(v)
}
