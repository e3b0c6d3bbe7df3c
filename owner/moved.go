package owner

import (
	"sync"
	"sync/atomic"
	"time"
)

// movedKeys remembers counters this node gave to a new owner that asked
// for them on first use, before this node's own ring says so. Until the
// entry expires (its ring has caught up by then), calls for such a key
// are passed on to the new owner instead of being counted here, so two
// owners never count one key at once.
type movedKeys struct {
	rt Runtime
	n  atomic.Int64 // entries, so the hot path skips the lock when empty
	mu sync.Mutex
	m  map[string]moved // by key
}

type moved struct {
	to    string
	until time.Time
}

func newMovedKeys(rt Runtime) *movedKeys { return &movedKeys{rt: rt, m: map[string]moved{}} }

func (k *movedKeys) add(key, to string, ttl time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.rt.Now()
	if len(k.m) > 1<<16 {
		for key, m := range k.m {
			if now.After(m.until) {
				delete(k.m, key)
			}
		}
	}
	k.m[key] = moved{to: to, until: now.Add(ttl)}
	k.n.Store(int64(len(k.m)))
}

// to returns the node a key was given to, if it still stands.
func (k *movedKeys) to(key string) (string, bool) {
	if k.n.Load() == 0 {
		return "", false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.m[key]
	if ok && k.rt.Now().After(m.until) {
		delete(k.m, key)
		k.n.Store(int64(len(k.m)))
		ok = false
	}
	return m.to, ok
}

// dropIf forgets key's entry if it names to.
func (k *movedKeys) dropIf(key, to string) {
	if k.n.Load() == 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok := k.m[key]; ok && m.to == to {
		delete(k.m, key)
		k.n.Store(int64(len(k.m)))
	}
}

// drain forgets every entry and returns the standing ones (key → node):
// this node's ring changed, and the new ring is the authority; a key the
// new ring gives this node is asked of the node that held it first.
func (k *movedKeys) drain() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.rt.Now()
	out := make(map[string]string, len(k.m))
	for key, m := range k.m {
		if now.Before(m.until) {
			out[key] = m.to
		}
	}
	clear(k.m)
	k.n.Store(0)
	return out
}

// keyPeers remembers, per key and for a while, the peer a key's state last
// went to or came from by hand-off, and when. Router.received answers
// whether a first-use "held by X" answer predates X's hand-off of the key;
// Router.handed where a key this node gave up went.
type keyPeers struct {
	rt Runtime
	mu sync.Mutex
	m  map[string]keyPeer
}

type keyPeer struct {
	peer string
	at   time.Time
}

// add records peer for key now; entries older than ttl are pruned when
// the map grows large.
func (k *keyPeers) add(key, peer string, ttl time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.rt.Now()
	if k.m == nil {
		k.m = map[string]keyPeer{}
	}
	if len(k.m) > 1<<16 {
		for key, e := range k.m {
			if now.Sub(e.at) > ttl {
				delete(k.m, key)
			}
		}
	}
	k.m[key] = keyPeer{peer: peer, at: now}
}

// since reports whether key was recorded with peer at or after t.
func (k *keyPeers) since(key, peer string, t time.Time) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	return ok && e.peer == peer && !e.at.Before(t)
}

// get returns the peer recorded for key within ttl.
func (k *keyPeers) get(key string, ttl time.Duration) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	if !ok || k.rt.Now().Sub(e.at) > ttl {
		return "", false
	}
	return e.peer, true
}
