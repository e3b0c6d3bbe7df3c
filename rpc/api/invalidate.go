package api

import (
	"sync"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// A fleet client caches the refusals its nodes gave (see ClientConfig's
// RefusalCacheSize). When uses of a key are given back, the key may have
// room before a cached refusal's wait is over, so every node tells its
// clients, on the MultiStreams they hold open, which keys to drop: the
// owner learns of the release first and tells its peers (Invalidate),
// and each node pushes the keys to each of its streams. The push is one
// message, sent by a goroutine of the stream's own so that a slow client
// never holds up the release.

// maxPendingInvalidations bounds the keys waiting to be pushed on one
// stream; past it the stream is told to drop all its cached refusals.
const maxPendingInvalidations = 4096

// pushes is the set of a node's open MultiStreams.
type pushes struct {
	mu   sync.Mutex
	subs map[*pushSub]struct{}
}

// pushSub is one stream's pending invalidations.
type pushSub struct {
	mu   sync.Mutex
	keys map[string]struct{}
	all  bool
	wake chan struct{} // capacity 1: something is pending
}

func newPushes() *pushes { return &pushes{subs: map[*pushSub]struct{}{}} }

func (p *pushes) subscribe() *pushSub {
	s := &pushSub{keys: map[string]struct{}{}, wake: make(chan struct{}, 1)}
	p.mu.Lock()
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	return s
}

func (p *pushes) unsubscribe(s *pushSub) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// invalidate queues keys on every stream. It does not block.
func (p *pushes) invalidate(keys []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for s := range p.subs {
		s.mu.Lock()
		if !s.all {
			for _, k := range keys {
				if len(s.keys) >= maxPendingInvalidations {
					s.all = true
					clear(s.keys)
					break
				}
				s.keys[k] = struct{}{}
			}
		}
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// take returns the message to push for what is pending, nil if nothing.
func (s *pushSub) take() *pb.MultiResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.all && len(s.keys) == 0 {
		return nil
	}
	m := &pb.MultiResponse{InvalidateAll: s.all}
	if !s.all {
		m.Invalidated = make([][]byte, 0, len(s.keys))
		for k := range s.keys {
			m.Invalidated = append(m.Invalidated, []byte(k))
		}
	}
	clear(s.keys)
	s.all = false
	return m
}
