package limiter

// A token bucket's give-backs move its timeline.
//
// GCRA keeps one arrival time, so the calls of a bucket lie on one
// timeline in the order they were recorded, each call's tokens a segment
// that ends where its receipt's After says: the arrival time it left,
// less the tokens then out on leases, which never refill while held and
// so sit at the end of the timeline, past every call (see receiptAfter).
// Giving a call back (a release) lowers the arrival time by d: every
// call recorded after it moves down the timeline by d with it, so a
// later call's receipt After then overstates where its own tokens lie by
// d. Released as is, it would give back up to d of the tokens of the
// calls recorded after it, which were never its own: one too many comes
// back, and a call passes that the bucket has no room for. A lease's
// return lowers the arrival time too, by its unused tokens, but moves no
// call: its k leave the end of the timeline and its used ones come back
// after every call recorded so far, as an expiry's k do. Neither is a
// move.
//
// BucketMoves is the record that lets a later release know how far its
// call moved. It holds the timeline moved (µs, summed) since the record
// began, under a random incarnation, and exists only for buckets whose
// arrival time some give-back lowered, while a receipt it may affect can
// still give anything back. A receipt is stamped with the record's
// incarnation and moved µs when one exists as its call is recorded; its
// release subtracts the moves since the stamp from its After:
//
//   - the same incarnation: the moves since the stamp;
//   - another incarnation, or no stamp: every move the record holds (the
//     record began after the receipt's call, or after the record that
//     stamped it ended, so none of its moves came before the call);
//   - a stamp ahead of the record (the record lost moves: a replica that
//     had not caught up, a new owner after a crash): nothing comes back.
//
// Why no release can then give back a later call's tokens: a release
// that lowers the arrival time by d moves each call's tokens down by at
// most d (those recorded before the released call by 0) and nothing ever
// moves them up (a merge or a lease's floor raises the arrival time, not
// where recorded tokens lie; a grant, a return or an expiry changes the
// held tokens past every call, or adds tokens after them). Each move is
// summed rounded up to whole µs, so the moves since a stamp are at least
// how far that call moved, and After minus them is at or before where
// its tokens end now. Remove gives back only what of the call lies past
// now, at most its cost: its own tokens. Subtracting too much only gives
// back less than the call's own (a call released after a later one it
// preceded gets nothing back for the later one's move): never more.
//
// When the record can go: every receipt recorded before a move left an
// After no later than the arrival time just before it (between moves the
// arrival time stays at or past the end of every call's tokens: it
// rises, or a return lowers it by held tokens, which lie past them), and
// Until is the latest of those, rounded up. From Until on, such a
// receipt's After is past and it gives nothing back, and a receipt
// recorded after the last move is exact without the record. A record
// whose Until is past is treated as absent everywhere.
type BucketMoves struct {
	// Inc is the record's incarnation, random and never 0 (0: no record).
	Inc uint64
	// Moved is the timeline moved since the record began (µs, each move
	// rounded up).
	Moved int64
	// Until is when the record can go (µs on the store's clock; in a
	// CounterState, relative to the export like every time).
	Until int64
}

// Live reports whether the record still matters at now.
func (mv *BucketMoves) Live(now int64) bool { return mv.Inc != 0 && mv.Until > now }

// Stamp returns what a receipt recorded at now carries: the incarnation
// and moved µs of a live record, zeros otherwise.
func (mv *BucketMoves) Stamp(now int64) (inc uint64, moved int64) {
	if !mv.Live(now) {
		return 0, 0
	}
	return mv.Inc, mv.Moved
}

// Since returns how far (µs) the call of a receipt stamped (inc, moved)
// has moved at most since it was recorded; ok is false when the stamp is
// ahead of the record, and the receipt must give nothing back.
func (mv *BucketMoves) Since(now int64, inc uint64, moved int64) (d int64, ok bool) {
	switch {
	case !mv.Live(now):
		return 0, true
	case inc != mv.Inc:
		return mv.Moved, true
	case moved > mv.Moved:
		return 0, false
	}
	return mv.Moved - moved, true
}

// note records a move of the arrival time from before down by d (both in
// units of 1/uses µs); fresh is the incarnation a new record takes (when
// none is live at now).
func (mv *BucketMoves) note(now int64, before, d u128, uses int64, fresh uint64) {
	if d.cmp(u128{}) <= 0 {
		return
	}
	if !mv.Live(now) {
		*mv = BucketMoves{Inc: fresh}
		if mv.Inc == 0 {
			mv.Inc = 1
		}
	}
	mv.Moved = satAdd(mv.Moved, clampInt(d.divCeil(u(uses))))
	mv.Until = max(mv.Until, clampInt(before.divCeil(u(uses))))
}

// Release gives back a call that took cost uses, whose receipt left the
// arrival time at after (µs, rounded up) and carries the stamp (inc,
// moved), from a bucket whose moves record is mv: After less the moves
// since the stamp (see BucketMoves) goes to Remove, and what comes back is
// recorded in mv as a move of the later calls. fresh is the incarnation
// mv takes if it begins here (random, not 0). It reports whether s or mv
// changed.
func (s *BucketState) Release(now int64, l Limit, cost, after int64, inc uint64, moved int64, mv *BucketMoves, fresh uint64) bool {
	return s.release(now, l, cost, after, inc, moved, 0, mv, fresh)
}

// release is Release with held tokens out on leases (see remove).
func (s *BucketState) release(now int64, l Limit, cost, after int64, inc uint64, moved, held int64, mv *BucketMoves, fresh uint64) bool {
	d, ok := mv.Since(now, inc, moved)
	if !ok {
		return false
	}
	if d > 0 {
		if after-now <= d { // after - d <= now, without overflow
			return false
		}
		after -= d
	}
	U := l.Uses
	before := s.scaled(U)
	if !s.remove(now, l, cost, after, held) {
		return false
	}
	mv.note(now, before, before.sub(s.scaled(U)), U, fresh)
	return true
}

// mergeMoves merges two records of one bucket (b's times on a's clock)
// into one that keeps every receipt of either safe: the same incarnation
// keeps the larger of each; two incarnations keep a's with both sums of
// moves (b's receipts become foreign and subtract it all, at least what
// they subtracted under b; a's subtract more than under a).
func mergeMoves(a, b BucketMoves, now int64) BucketMoves {
	switch {
	case !b.Live(now):
		return a
	case !a.Live(now):
		return b
	case a.Inc == b.Inc:
		return BucketMoves{Inc: a.Inc, Moved: max(a.Moved, b.Moved), Until: max(a.Until, b.Until)}
	}
	return BucketMoves{Inc: a.Inc, Moved: satAdd(a.Moved, b.Moved), Until: max(a.Until, b.Until)}
}
