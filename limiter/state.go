package limiter

import (
	"slices"
	"time"
)

// CounterState is one counter's state in motion between stores: handed
// off to a key's new owner or replicated to a successor. Its times are
// relative to the instant it was exported (t - now, so the past is
// negative): ages, never clock readings, so two nodes need no common
// clock.
type CounterState struct {
	// Key is the counter's key.
	Key string
	// Algorithm says which of Log, Counts, Bucket and Fixed holds the
	// state; the others are zero.
	Algorithm Algorithm
	// Window is the limit's window (counters are kept per key and window).
	Window time.Duration
	// Log holds a sliding log's calls, oldest first, or a concurrency
	// limit's slots (each a call's id, cost and the age it was taken at).
	Log []LogUse
	// Delta says that Log holds only the calls recorded since the
	// counter's previous export by Memory.ExportSince: a replica adds
	// them to what it holds (Put) instead of replacing it.
	Delta bool
	// Counts holds a sliding window's two counters.
	Counts WindowState
	// Bucket holds a token bucket's arrival time.
	Bucket BucketState
	// Holds are a token bucket's tokens out on leases (Memory.GrantBucket):
	// the floor under its arrival time, which must move with the state (a
	// replica or a new owner without them would let the bucket refill
	// while holders still spend their leases).
	Holds []BucketHold
	// Moves is a token bucket's moves record (see BucketMoves; Inc 0:
	// none): it travels with the state, so the receipts the sender
	// stamped still subtract their moves when released where the state
	// went. A state may be exported for its record alone, its bucket
	// full again.
	Moves BucketMoves
	// Fixed holds a fixed window's end and count. The end travels as an
	// age like every time: the receiving store counts the window until
	// the same remaining time has passed on its clock, then opens windows
	// aligned to its own clock (two clocks' offset moves that one end,
	// never the later ones).
	Fixed FixedState
}

// shift moves the state's times by d. Only the algorithm's own fields
// move: the others stay zero rather than carry -now, a clock reading, to
// the wire.
func (c *CounterState) shift(d int64) {
	switch c.Algorithm {
	case SlidingLog, Concurrency:
		for i := range c.Log {
			c.Log[i].At += d
		}
	case SlidingWindow:
		c.Counts.Start += d
	case FixedWindow:
		c.Fixed.End += d
	default:
		c.Bucket.TAT += d
		if c.Moves.Inc != 0 {
			c.Moves.Until += d
		}
		for i := range c.Holds {
			c.Holds[i].Expiry += d
		}
	}
}

// Export returns the state of every counter whose key matches, with times
// made relative; remove also drops them from m (the keys are no longer
// ours). Expired state is skipped.
func (m *Memory) Export(match func(key string) bool, remove bool) []CounterState {
	var out []CounterState
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		// Read under the lock: every use recorded so far is then in the
		// past, so no exported age is negative (see CheckState).
		now := m.clock.now()
		for alg, logs := range [...]map[counterKey]*LogState{SlidingLog: s.logs, Concurrency: s.slots} {
			if logs == nil {
				continue
			}
			for ck, st := range logs {
				if !match(ck.key) {
					continue
				}
				if c, ok := exportLog(ck, Algorithm(alg), st, now, m.bounds.MaxLogUses); ok {
					out = append(out, c)
				}
				if remove {
					delete(logs, ck)
					m.count(-1)
				}
			}
		}
		for ck, st := range s.windows {
			if !match(ck.key) {
				continue
			}
			if c, ok := exportWindow(ck, *st, now); ok {
				out = append(out, c)
			}
			if remove {
				delete(s.windows, ck)
				m.count(-1)
			}
		}
		for ck, st := range s.buckets {
			if !match(ck.key) {
				continue
			}
			if c, ok := m.exportBucket(s, ck, *st, now); ok {
				out = append(out, c)
			}
			if remove {
				delete(s.buckets, ck)
				delete(s.holds, ck)
				delete(s.moves, ck)
				m.count(-1)
			}
		}
		for ck, st := range s.fixed {
			if !match(ck.key) {
				continue
			}
			if c, ok := exportFixed(ck, *st, now); ok {
				out = append(out, c)
			}
			if remove {
				delete(s.fixed, ck)
				m.count(-1)
			}
		}
		s.mu.Unlock()
	}
	return out
}

// ExportCounter returns the state of one counter, if m holds any.
func (m *Memory) ExportCounter(key string, alg Algorithm, window time.Duration) (CounterState, bool) {
	ck := counterKey{key: key, window: Micros(window)}
	s := &m.shards[m.shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.clock.now() // under the lock: see Export
	switch alg {
	case SlidingLog, Concurrency:
		if st := s.logsOf(alg)[ck]; st != nil {
			return exportLog(ck, alg, st, now, m.bounds.MaxLogUses)
		}
	case SlidingWindow:
		if st := s.windows[ck]; st != nil {
			return exportWindow(ck, *st, now)
		}
	case FixedWindow:
		if st := s.fixed[ck]; st != nil {
			return exportFixed(ck, *st, now)
		}
	default:
		if st := s.buckets[ck]; st != nil {
			return m.exportBucket(s, ck, *st, now)
		}
	}
	return CounterState{}, false
}

// LogMark is how far a replica holds a sliding log: up to the call with
// ID, as the log was after Edits edits. A caller of ExportSince keeps one
// per counter (AppendExportShipped uses the one the store keeps in the
// log instead); the zero mark asks for the whole log.
type LogMark struct {
	ID    uint64
	Edits uint32
}

// ExportSince exports one counter for a replica that holds it up to
// since. A sliding log whose only change since then is new calls exports
// just those (Delta set; an empty Log when there are none); otherwise (a
// zero mark, a release, a merge), and always for the other algorithms
// (whose state is a few numbers), the whole state. It returns the mark of
// what it exported, to pass to the next call once the replica has it (a
// replicator whose shipment was lost passes the zero mark instead).
func (m *Memory) ExportSince(key string, alg Algorithm, window time.Duration, since LogMark) (CounterState, LogMark, bool) {
	c, mark, ok, _ := m.AppendExportSince(nil, key, alg, window, since)
	return c, mark, ok
}

// AppendExportSince is ExportSince with a sliding log's exported calls
// appended to uses, which it returns grown: the state's Log is that
// appended part (its capacity ends with it, so appending to it copies). A
// replicator exporting hundreds of counters per shipment reuses one
// buffer across shipments instead of allocating a log per counter; it
// must not reuse the buffer while a state exported into it is in use.
func (m *Memory) AppendExportSince(uses []LogUse, key string, alg Algorithm, window time.Duration, since LogMark) (CounterState, LogMark, bool, []LogUse) {
	return m.appendExport(uses, key, alg, window, since, false, false)
}

// AppendExportShipped is AppendExportSince from the mark the store keeps
// in each sliding log for its replicas (the replication cursor), which it
// then moves to what it exported: a replicator ships a counter without a
// map of its own marks. delta false exports the whole state (the replicas
// may be new, or may have lost what they were sent). The cursor moves
// when the state is exported, before it lands: a replicator whose
// shipment fails calls ForgetShipped, so the next export is whole. One
// replicator per store: a second one's exports would move the same
// cursor.
func (m *Memory) AppendExportShipped(uses []LogUse, key string, alg Algorithm, window time.Duration, delta bool) (CounterState, bool, []LogUse) {
	c, _, ok, uses := m.appendExport(uses, key, alg, window, LogMark{}, true, delta)
	return c, ok, uses
}

// appendExport is AppendExportSince from since, or with cursor
// AppendExportShipped from the log's cursor (delta) or whole.
func (m *Memory) appendExport(uses []LogUse, key string, alg Algorithm, window time.Duration, since LogMark, cursor, delta bool) (CounterState, LogMark, bool, []LogUse) {
	if alg != SlidingLog && alg != Concurrency {
		c, ok := m.ExportCounter(key, alg, window)
		return c, LogMark{}, ok, uses
	}
	ck := counterKey{key: key, window: Micros(window)}
	s := &m.shards[m.shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.clock.now() // under the lock: see Export
	st := s.logsOf(alg)[ck]
	if st == nil {
		return CounterState{}, LogMark{}, false, uses
	}
	if cursor && delta {
		since = LogMark{ID: st.shipped, Edits: st.shippedEdits}
	}
	c, mark, ok, uses := m.appendLogSince(uses, ck, alg, st, now, since)
	if cursor {
		st.shipped, st.shippedEdits = mark.ID, mark.Edits
	}
	return c, mark, ok, uses
}

// ForgetShipped drops a sliding log's replication cursor: its next
// AppendExportShipped exports it whole.
func (m *Memory) ForgetShipped(key string, alg Algorithm, window time.Duration) {
	if alg != SlidingLog && alg != Concurrency {
		return
	}
	s := &m.shards[m.shardOf(key)]
	s.mu.Lock()
	if st := s.logsOf(alg)[counterKey{key: key, window: Micros(window)}]; st != nil {
		st.shipped, st.shippedEdits = 0, 0
	}
	s.mu.Unlock()
}

// appendLogSince exports st, a log held under ck, for a replica that holds
// it up to since (callers hold the shard's lock).
func (m *Memory) appendLogSince(uses []LogUse, ck counterKey, alg Algorithm, st *LogState, now int64, since LogMark) (CounterState, LogMark, bool, []LogUse) {
	st.Trim(now, ck.window)
	from, found := 0, false
	if since.ID != 0 && since.Edits == st.edits {
		for i := len(st.Uses) - 1; i >= 0; i-- {
			if st.Uses[i].ID == since.ID {
				from, found = i+1, true
				break
			}
		}
	}
	mark := LogMark{Edits: st.edits}
	if n := len(st.Uses); n > 0 {
		mark.ID = st.Uses[n-1].ID
	}
	if !found && len(st.Uses) == 0 {
		return CounterState{}, LogMark{}, false, uses
	}
	n := len(uses)
	uses = append(uses, clipLog(st.Uses[from:], m.bounds.MaxLogUses)...)
	c := CounterState{Key: ck.key, Algorithm: alg, Window: time.Duration(ck.window) * time.Microsecond, Log: uses[n:len(uses):len(uses)], Delta: found}
	c.shift(-now)
	return c, mark, true, uses
}

func exportLog(ck counterKey, alg Algorithm, st *LogState, now, maxUses int64) (CounterState, bool) {
	st.Trim(now, ck.window)
	if len(st.Uses) == 0 {
		return CounterState{}, false
	}
	c := CounterState{Key: ck.key, Algorithm: alg, Window: time.Duration(ck.window) * time.Microsecond, Log: slices.Clone(clipLog(st.Uses, maxUses))}
	c.shift(-now)
	return c, true
}

func exportWindow(ck counterKey, st WindowState, now int64) (CounterState, bool) {
	if windowExpired(&st, now, ck.window) {
		return CounterState{}, false
	}
	c := CounterState{Key: ck.key, Algorithm: SlidingWindow, Window: time.Duration(ck.window) * time.Microsecond, Counts: st}
	c.shift(-now)
	return c, true
}

func exportFixed(ck counterKey, st FixedState, now int64) (CounterState, bool) {
	if st.Empty(now) {
		return CounterState{}, false
	}
	c := CounterState{Key: ck.key, Algorithm: FixedWindow, Window: time.Duration(ck.window) * time.Microsecond, Fixed: st}
	c.shift(-now)
	return c, true
}

// exportBucket exports a bucket with its holds (the expired ones settled
// first, and the floor applied at now). Callers hold s.mu.
func (m *Memory) exportBucket(s *shard, ck counterKey, st BucketState, now int64) (CounterState, bool) {
	holds := m.exportHolds(s, ck, &st, now)
	var mv BucketMoves
	if len(s.moves) > 0 {
		if mv = s.moves[ck]; !mv.Live(now) {
			mv = BucketMoves{}
		}
	}
	if st.Empty(now) && mv.Inc == 0 {
		return CounterState{}, false
	}
	c := CounterState{Key: ck.key, Algorithm: TokenBucket, Window: time.Duration(ck.window) * time.Microsecond, Bucket: st, Holds: holds, Moves: mv}
	c.shift(-now)
	return c, true
}

// Import merges states exported by another store (times relative to the
// export) into m, on m's clock. A merge can only count more, never less:
// a sliding log takes the union of calls by id; a sliding window keeps the
// fuller of the two states; a bucket the later arrival time; a fixed
// window the larger count (and the later end). Importing the same state
// twice changes nothing. Import ignores the key bound: it is for state
// that moves within a node (adopted replicas, a failed hand-off put
// back), which must never be dropped; ImportWithin keeps the bound for
// state a peer sends. Invalid states are skipped.
func (m *Memory) Import(states []CounterState) {
	now := m.clock.now()
	for _, c := range states {
		m.importOne(c, now, false)
	}
}

// importOne merges one state; bounded, it refuses (false) a state that
// would add a counter past the key budget.
func (m *Memory) importOne(c CounterState, now int64, bounded bool) bool {
	if c.Key == "" || !c.Algorithm.Valid() || c.Window < time.Millisecond || c.Window%time.Millisecond != 0 {
		return true // skipped, not refused: see CheckState
	}
	c.Log = slices.Clone(c.Log)
	c.Holds = slices.Clone(c.Holds)
	c.shift(now)
	ck := counterKey{key: c.Key, window: Micros(c.Window)}
	s := &m.shards[m.shardOf(c.Key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	reserved := false
	if bounded && m.budget != nil && !m.has(s, &item{ck: ck, alg: c.Algorithm}) &&
		(c.Algorithm != FixedWindow || !c.Fixed.Empty(now)) { // an empty fixed window adds nothing
		if !m.budget.reserve(1) {
			return false
		}
		reserved = true
	}
	switch c.Algorithm {
	case SlidingLog, Concurrency:
		logs := s.logsOf(c.Algorithm)
		st := logs[ck]
		if st == nil {
			st = &LogState{}
			logs[m.ownReserved(ck, reserved)] = st
		}
		mergeLog(st, c.Log)
		st.Trim(now, ck.window)
		st.edits++ // merged calls may sit before the last export
		s.lower(logExpiry(st, ck.window))
	case SlidingWindow:
		st := s.windows[ck]
		if st != nil {
			*st = mergeWindow(*st, c.Counts, now, ck.window)
		} else {
			st = new(WindowState)
			*st = mergeWindow(WindowState{}, c.Counts, now, ck.window)
			s.windows[m.ownReserved(ck, reserved)] = st
		}
		s.lower(windowExpiry(st, ck.window))
	case FixedWindow:
		if st := s.fixed[ck]; st != nil {
			*st = mergeFixed(*st, c.Fixed, now)
			s.lower(fixedExpiry(st))
		} else if !c.Fixed.Empty(now) {
			st := c.Fixed
			s.fixed[m.ownReserved(ck, reserved)] = &st
			s.lower(fixedExpiry(&st))
		}
	default:
		st := s.buckets[ck]
		if st != nil {
			*st = mergeBucket(*st, c.Bucket)
		} else {
			st = new(BucketState)
			*st = mergeBucket(BucketState{}, c.Bucket)
			s.buckets[m.ownReserved(ck, reserved)] = st
		}
		if st.Uses > 0 {
			if c.Moves.Live(now) {
				s.setMoves(ck, mergeMoves(s.moves[ck], c.Moves, now), now)
			}
			s.mergeHolds(ck, c.Holds)
			m.heldAt(s, ck, now) // holds that expired in transit: settled at their expiry
		}
		s.lower(bucketExpiry(st))
	}
	return true
}

func mergeLog(st *LogState, in []LogUse) {
	index := make(map[uint64]int, len(st.Uses))
	for i, use := range st.Uses {
		index[use.ID] = i
	}
	for _, use := range in {
		i, ok := index[use.ID]
		if !ok {
			index[use.ID] = len(st.Uses)
			st.Uses = append(st.Uses, use)
			st.Total += use.Cost
		} else if use.At > st.Uses[i].At {
			st.Uses[i].At = use.At // the later reading keeps it counted longer
		}
	}
	sortUses(st.Uses)
}

// sortUses puts uses oldest first (equal times keep their order).
func sortUses(us []LogUse) {
	slices.SortStableFunc(us, func(a, b LogUse) int {
		switch {
		case a.At < b.At:
			return -1
		case a.At > b.At:
			return 1
		}
		return 0
	})
}

func mergeWindow(a, b WindowState, now, w int64) WindowState {
	a.Advance(now, w)
	if b.Curr != 0 || b.Prev != 0 {
		b.Advance(now, w)
	}
	if a.Curr == 0 && a.Prev == 0 {
		return b
	}
	if b.Curr == 0 && b.Prev == 0 {
		return a
	}
	if a.Start == b.Start {
		return WindowState{Start: a.Start, Curr: max(a.Curr, b.Curr), Prev: max(a.Prev, b.Prev)}
	}
	ea, eb := max(now-a.Start, 0), max(now-b.Start, 0)
	if b.Curr+b.weighted(eb, w) > a.Curr+a.weighted(ea, w) {
		return b
	}
	return a
}

func mergeBucket(a, b BucketState) BucketState {
	if a.Uses == 0 {
		return b
	}
	if b.Uses == 0 {
		return a
	}
	if b.scaled(a.Uses).cmp(a.scaled(a.Uses)) > 0 {
		return b
	}
	return a
}

// Put replaces the state of each counter with the one given (times
// relative to its export), as a replica holder does with what the owner
// sends: the owner is the authority, so a release it made shows here too.
// A Delta state adds its calls to the log held instead (ExportSince);
// missing lists the Delta states (by index) whose log m did not hold, so
// that it holds only their new calls: their sender should send them whole.
// Put ignores the key bound; PutWithin keeps it.
func (m *Memory) Put(states []CounterState) (missing []int) {
	missing, _ = m.put(states, false)
	return missing
}

// PutWithin is Put within the key budget: refused lists the states (by
// index) that would have added a counter past it, which m does not hold.
func (m *Memory) PutWithin(states []CounterState) (missing, refused []int) {
	return m.put(states, true)
}

func (m *Memory) put(states []CounterState, bounded bool) (missing, refused []int) {
	var keep []CounterState
	var keepIdx []int
	// One clock reading for the batch: a replica holder stores every
	// change of its owners' keys, and the reading at the batch's start is
	// the one nearest the states' export, so no call is held as older
	// than it is (a later reading would only make calls look newer).
	now := m.clock.now()
	for i := range states {
		c := &states[i] // not a copy: a CounterState is some 200 bytes
		if m.putLog(c, now) {
			continue
		}
		if c.Delta {
			// New calls of a log this store does not hold (it restarted,
			// or missed a shipment): keep what there is.
			missing = append(missing, i)
			if len(c.Log) > 0 {
				keep, keepIdx = append(keep, *c), append(keepIdx, i)
			}
			continue
		}
		m.Delete(c.Key, c.Algorithm, c.Window)
		if !c.empty() {
			keep, keepIdx = append(keep, *c), append(keepIdx, i)
		}
	}
	if !bounded {
		m.Import(keep)
		return missing, nil
	}
	for _, j := range m.ImportWithin(keep) {
		refused = append(refused, keepIdx[j])
	}
	return missing, refused
}

// putLog is Put's common case for one state: a sliding log m already holds
// is replaced in place (or, for a Delta, added to), in one map lookup and,
// for a log as an owner exports it, no allocation (a replica holder gets
// every change of its owners' keys).
// It reports false, doing nothing, for any other state. now is the
// store's clock for the batch (see put); c is not changed.
func (m *Memory) putLog(c *CounterState, now int64) bool {
	if (c.Algorithm != SlidingLog && c.Algorithm != Concurrency) || (len(c.Log) == 0 && !c.Delta) || c.Key == "" || c.Window < time.Millisecond || c.Window%time.Millisecond != 0 {
		return false
	}
	ck := counterKey{key: c.Key, window: Micros(c.Window)}
	s := &m.shards[m.shardOf(c.Key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.logsOf(c.Algorithm)[ck]
	if st == nil {
		return false
	}
	switch {
	case c.Delta:
		addUses(st, c.Log, now)
	case inOrderOnce(c.Log):
		// As an owner exports it: copy, no merge needed.
		st.Uses, st.Total = st.Uses[:0], 0
		for _, u := range c.Log {
			u.At += now
			st.Uses = append(st.Uses, u)
			st.Total += u.Cost
		}
	default:
		// What Delete then Import would leave: c's log merged into nothing.
		st.Uses, st.Total = st.Uses[:0], 0
		cc := *c
		cc.Log = slices.Clone(c.Log)
		cc.shift(now)
		mergeLog(st, cc.Log)
	}
	st.edits++
	st.Trim(now, ck.window)
	s.lower(logExpiry(st, ck.window)) // the owner's log may end sooner than the one held
	return true
}

// inOrderOnce reports whether us is oldest first with no ID twice, for a
// short log (a long one is not checked: false).
func inOrderOnce(us []LogUse) bool {
	if len(us) > 32 {
		return false
	}
	for i := range us {
		if i > 0 && us[i-1].At > us[i].At {
			return false
		}
		for j := range i {
			if us[j].ID == us[i].ID {
				return false
			}
		}
	}
	return true
}

// addUses adds a delta's calls (times relative to now) to st, keeping it
// oldest first. A delta holds only calls its sender had not exported
// before, so they are not looked up by ID (a hot key's log may hold
// thousands); they are normally newer than all of st's and go at the end
// without a sort.
func addUses(st *LogState, in []LogUse, now int64) {
	sorted := true
	for _, u := range in {
		u.At += now
		if n := len(st.Uses); n > 0 && st.Uses[n-1].At > u.At {
			sorted = false
		}
		st.Uses = append(st.Uses, u)
		st.Total += u.Cost
	}
	if !sorted {
		sortUses(st.Uses)
	}
}

// empty reports a state that counts nothing (a deletion in transit).
func (c *CounterState) empty() bool {
	switch c.Algorithm {
	case SlidingLog, Concurrency:
		return len(c.Log) == 0
	case SlidingWindow:
		return c.Counts.Curr == 0 && c.Counts.Prev == 0
	case FixedWindow:
		return c.Fixed.Count == 0
	}
	return c.Bucket.Uses == 0
}

// Delete drops one counter.
func (m *Memory) Delete(key string, alg Algorithm, window time.Duration) {
	ck := counterKey{key: key, window: Micros(window)}
	s := &m.shards[m.shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	var ok bool
	switch alg {
	case SlidingLog, Concurrency:
		_, ok = s.logsOf(alg)[ck]
		delete(s.logsOf(alg), ck)
	case SlidingWindow:
		_, ok = s.windows[ck]
		delete(s.windows, ck)
	case FixedWindow:
		_, ok = s.fixed[ck]
		delete(s.fixed, ck)
	default:
		_, ok = s.buckets[ck]
		delete(s.buckets, ck)
		delete(s.holds, ck)
		delete(s.moves, ck)
	}
	if ok {
		m.count(-1)
	}
}

// TakeCounter exports one counter and drops it in one step, so no use
// recorded in between is lost (a node giving a key to its new owner).
func (m *Memory) TakeCounter(key string, alg Algorithm, window time.Duration) (CounterState, bool) {
	ck := counterKey{key: key, window: Micros(window)}
	s := &m.shards[m.shardOf(key)]
	s.mu.Lock()
	defer s.mu.Unlock()
	now := m.clock.now() // under the lock: see Export
	var c CounterState
	var ok, had bool
	switch alg {
	case SlidingLog, Concurrency:
		if st := s.logsOf(alg)[ck]; st != nil {
			c, ok = exportLog(ck, alg, st, now, m.bounds.MaxLogUses)
			delete(s.logsOf(alg), ck)
			had = true
		}
	case SlidingWindow:
		if st := s.windows[ck]; st != nil {
			c, ok = exportWindow(ck, *st, now)
			delete(s.windows, ck)
			had = true
		}
	case FixedWindow:
		if st := s.fixed[ck]; st != nil {
			c, ok = exportFixed(ck, *st, now)
			delete(s.fixed, ck)
			had = true
		}
	default:
		if st := s.buckets[ck]; st != nil {
			c, ok = m.exportBucket(s, ck, *st, now)
			delete(s.buckets, ck)
			delete(s.holds, ck)
			delete(s.moves, ck)
			had = true
		}
	}
	if had {
		m.count(-1)
	}
	return c, ok
}
