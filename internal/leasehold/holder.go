package leasehold

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// ErrNoLeases is what a Transport's Exchange answers (wrapped or not) for
// an owner that grants no leases: the holder stops asking it.
var ErrNoLeases = errors.New("leasehold: the owner grants no leases")

// Traffic is what a holder sends one owner at a tick: the returns of its
// leases, releases of uses whose lease went back, and asks for new ones.
type Traffic struct {
	Holder   string
	Returns  []Return
	Releases []Release
	Asks     []Ask
}

// Transport carries a holder's traffic to owners.
type Transport interface {
	// Owner names the owner of key now (false: none known).
	Owner(key string) (string, bool)
	// Exchange sends owner its traffic and answers one grant per ask, in
	// order (K 0: none).
	Exchange(ctx context.Context, owner string, t Traffic) ([]Grant, error)
}

// HolderConfig configures a Holder.
type HolderConfig struct {
	// Name is the holder's name at the owners (unique per process: the
	// owners recall by it). Required.
	Name string
	// Table configures the leases table (Now is required).
	Table Config
	// Transport carries the traffic. Required.
	Transport Transport
	// Tick is how often the traffic goes out: an ask waits at most this
	// long to leave. Default 2 ms.
	Tick time.Duration
	// Timeout bounds one exchange. Default 1 s.
	Timeout time.Duration
	// Granted, when set, is told of every owner that granted a lease (the
	// fleet client opens its recall stream to it).
	Granted func(owner string)
}

// Holder is a leaseholder's whole side: its table, the local decisions,
// and the task that sends the lease traffic every Tick. The fleet client
// and an embedded node both are one.
type Holder struct {
	cfg  HolderConfig
	tbl  *Table
	stop chan struct{}
	done chan struct{}
	drop bool // set by Abandon before stop closes: no last exchange
	// wake tells an idle task that traffic is waiting (cap 1: a signal
	// sent while the task is busy is kept for its next look).
	wake chan struct{}
	// ticks counts the task's looks at its traffic (a test reads it).
	ticks atomic.Int64

	mu    sync.Mutex
	asks  []pendingAsk
	rels  []Release
	rets  []Return // replaced by a new grant, or recalled and not answered
	unimp map[string]bool
}

type pendingAsk struct {
	e   limiter.Entry
	ask Ask
}

// NewHolder starts a holder; Close stops it and gives every lease back.
func NewHolder(cfg HolderConfig) *Holder {
	if cfg.Tick <= 0 {
		cfg.Tick = 2 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	h := &Holder{cfg: cfg, tbl: New(cfg.Table), stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1), unimp: map[string]bool{}}
	go h.loop()
	return h
}

// Name is the holder's name at the owners.
func (h *Holder) Name() string { return h.cfg.Name }

// Table is the holder's leases.
func (h *Holder) Table() *Table { return h.tbl }

// Decide admits a single-entry consume from a lease when it can (ok);
// otherwise it counts the call toward asking for one, and the caller goes
// to the owner.
func (h *Holder) Decide(ctx context.Context, entries []limiter.Entry) (limiter.Verdict, bool) {
	if len(entries) != 1 || !Leasable(entries[0]) {
		return limiter.Verdict{}, false
	}
	e := entries[0]
	releasable := limiter.WantsRelease(ctx)
	// Every call counts toward the key's rate, and a lease a third spent
	// or a third over is renewed ahead, so calls keep finding one.
	id, ok, k, length, asking := h.tbl.TakeOrAsk(e, releasable)
	if asking {
		h.mu.Lock()
		h.asks = append(h.asks, pendingAsk{e: e, ask: Ask{Key: e.Key, Limit: e.Limit, K: k, Length: length}})
		h.mu.Unlock()
		h.poke()
	}
	if !ok {
		return limiter.Verdict{}, false
	}
	v := limiter.Verdict{Allowed: true, ResetAt: h.cfg.Table.Now().Add(e.Limit.Window)}
	if releasable {
		var once sync.Once
		v.Release = func(context.Context) error {
			once.Do(func() {
				if !h.tbl.Give(e, id) {
					h.mu.Lock()
					h.rels = append(h.rels, Release{Key: e.Key, Limit: e.Limit, ID: id, Cost: max(e.Cost, 1)})
					h.mu.Unlock()
					h.poke()
				}
			})
			return nil
		}
	}
	return v, true
}

// Recall takes the leases ids back for an owner that asks (see
// Table.Recall) and returns their returns, for the caller to send back in
// its answer.
func (h *Holder) Recall(ids []uint64) []Return { return h.tbl.Recall(ids) }

// Close stops the task and gives every lease back (one last exchange per
// owner, each bounded by Timeout).
func (h *Holder) Close() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

// Abandon stops the task as a crash of the holder's process would: nothing
// goes back, and the owners count the leases' unused uses until each
// lease's end plus its window. For in-process crash tests.
func (h *Holder) Abandon() {
	h.mu.Lock()
	h.drop = true
	h.mu.Unlock()
	h.Close()
}

func (h *Holder) loop() {
	defer close(h.done)
	t := time.NewTimer(h.cfg.Tick)
	defer t.Stop()
	for {
		// With no lease held and nothing to send the task sleeps until a
		// call asks (most processes hold no lease most of the time: a
		// ticker would wake it 500 times a second for nothing, issue 20's
		// idle cost). Traffic then waits at most one Tick, so the asks of
		// one Tick still travel together.
		if h.idle() {
			select {
			case <-h.stop:
				h.last()
				return
			case <-h.wake:
			}
			t.Reset(h.cfg.Tick)
		}
		select {
		case <-h.stop:
			h.last()
			return
		case <-t.C:
			h.ticks.Add(1)
			h.send(h.tbl.Due())
			t.Reset(h.cfg.Tick)
		}
	}
}

// poke wakes an idle task.
func (h *Holder) poke() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// idle: no lease held and no traffic waiting.
func (h *Holder) idle() bool {
	h.mu.Lock()
	pending := len(h.asks) + len(h.rels) + len(h.rets)
	h.mu.Unlock()
	return pending == 0 && h.tbl.Held() == 0
}

// last is the task's end: every lease goes back, unless Abandon said a
// crash.
func (h *Holder) last() {
	h.mu.Lock()
	drop := h.drop
	h.mu.Unlock()
	if !drop {
		h.send(h.tbl.All())
	}
}

// owed is one owner's share of a tick's traffic.
type owed struct {
	owner string
	t     Traffic
	asks  []pendingAsk
}

// send groups returns, releases and asks by owner and sends them.
func (h *Holder) send(rets []Return) {
	h.mu.Lock()
	asks, rels := h.asks, h.rels
	rets = append(rets, h.rets...)
	h.asks, h.rels, h.rets = nil, nil, nil
	h.mu.Unlock()
	if len(rets) == 0 && len(asks) == 0 && len(rels) == 0 {
		return
	}
	by := map[string]*owed{}
	var order []*owed
	get := func(key string) *owed {
		o, ok := h.cfg.Transport.Owner(key)
		if !ok {
			return nil
		}
		t := by[o]
		if t == nil {
			t = &owed{owner: o, t: Traffic{Holder: h.cfg.Name}}
			by[o] = t
			order = append(order, t)
		}
		return t
	}
	for _, r := range rets {
		// A return goes to the key's owner now (after a hand-off, the new
		// one); one that cannot go anywhere is dropped: its reservation
		// counts every use until it leaves the log.
		if t := get(r.Key); t != nil {
			t.t.Returns = append(t.t.Returns, r)
		}
	}
	for _, r := range rels {
		if t := get(r.Key); t != nil {
			t.t.Releases = append(t.t.Releases, r)
		}
	}
	for _, a := range asks {
		t := get(a.ask.Key)
		h.mu.Lock()
		skip := t == nil || h.unimp[t.owner]
		h.mu.Unlock()
		if skip {
			h.tbl.Failed(a.e)
			continue
		}
		t.asks = append(t.asks, a)
		t.t.Asks = append(t.t.Asks, a.ask)
	}
	var wg sync.WaitGroup
	for _, t := range order {
		if len(t.t.Returns) == 0 && len(t.t.Releases) == 0 && len(t.t.Asks) == 0 {
			continue
		}
		wg.Go(func() { h.exchange(t) })
	}
	wg.Wait()
}

// exchange sends one owner its traffic and installs the grants.
func (h *Holder) exchange(t *owed) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Timeout)
	defer cancel()
	sent := h.cfg.Table.Now()
	gs, err := h.cfg.Transport.Exchange(ctx, t.owner, t.t)
	if err != nil {
		if errors.Is(err, ErrNoLeases) {
			h.mu.Lock()
			h.unimp[t.owner] = true
			h.mu.Unlock()
		}
		for _, a := range t.asks {
			h.tbl.Failed(a.e)
		}
		return
	}
	granted := false
	for i, a := range t.asks {
		g := Grant{Key: a.ask.Key, Limit: a.ask.Limit}
		if i < len(gs) {
			g = gs[i]
			g.Key, g.Limit = a.ask.Key, a.ask.Limit
		}
		if old, ok := h.tbl.Install(sent, g); ok {
			h.mu.Lock()
			h.rets = append(h.rets, old) // sent at the next tick
			h.mu.Unlock()
		}
		if g.K == 0 {
			h.tbl.Failed(a.e)
		} else {
			granted = true
		}
	}
	if granted && h.cfg.Granted != nil {
		h.cfg.Granted(t.owner)
	}
}
