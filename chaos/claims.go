package chaos

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

// The majority rule is seen in a node's own answers: a node cut off from
// the majority routes by the ring of every member it knows, so its Owner
// answer for a key of a member it cannot reach stays that member. Without
// the rule (RINGLIMIT_SABOTAGE=majority) it names itself once it has
// declared the others dead, and counts their keys from nothing. The
// overshoot rows of the partition scenario cannot tell the difference
// during the cut: the cut-off node admits at most the limit per key
// either way (the local fallback's share over the one member it sees is
// the whole limit), and the doubled counts only show after healing, where
// the two sides merge. So the claims are watched directly.

// claims is what watchClaims saw.
type claims struct {
	node string
	keys int // keys watched (owned by other nodes before the fault)
	// rounds of Owner calls answered, and among them those during which
	// the node saw no majority (its Members answer before and after the
	// round: alive*2 <= alive+suspect+dead).
	rounds, minority int
	// taken: key -> first offset the node named itself its owner while
	// it saw no majority (the rule forbids it); stale: the same while it
	// still saw a majority, its view not yet caught up with the cut.
	taken, stale map[string]time.Duration
}

// watchClaims asks node x, every 200 ms, for its members and for the owner
// of every watched key whose owner before the fault was another node,
// until the returned stop is called (more than once is fine).
func (r *run) watchClaims(x string, keys []string) (stop func() claims) {
	var watch []string
	for _, k := range keys {
		if o := r.owners[k]; o != "" && o != x {
			watch = append(watch, k)
		}
	}
	cl := claims{node: x, keys: len(watch), taken: map[string]time.Duration{}, stale: map[string]time.Duration{}}
	var mu sync.Mutex
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			before, err1 := r.seesNoMajority(ctx, x)
			mine := map[string]time.Duration{}
			ok := err1 == nil
			for _, k := range watch {
				at := r.h.Now()
				o, err := r.c.Owner(ctx, x, k)
				if err != nil {
					ok = false
					break
				}
				if o == x {
					mine[k] = at
				}
			}
			after, err2 := r.seesNoMajority(ctx, x)
			if ok && err2 == nil {
				mu.Lock()
				cl.rounds++
				into := cl.stale
				if before && after {
					cl.minority++
					into = cl.taken
				}
				for k, at := range mine {
					if _, seen := into[k]; !seen {
						into[k] = at
					}
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() claims {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return cl
	}
}

// seesNoMajority asks x for its members: true when at most half of those
// it knows (alive, suspect or dead) are alive, the majority rule's test.
func (r *run) seesNoMajority(ctx context.Context, x string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := r.c.clients[x].Members(ctx, &pb.MembersRequest{})
	if err != nil {
		return false, err
	}
	alive, known := 0, 0
	for _, m := range resp.GetMembers() {
		switch m.GetState() {
		case "alive":
			alive++
			known++
		case "suspect", "dead":
			known++
		}
	}
	return alive*2 <= known, nil
}

// judgeClaims: while it saw no majority, the cut-off node named itself
// the owner of no key of a member it could not reach (a promise); the
// keys it named itself owner of while its view still showed a majority
// are reported.
func judgeClaims(r *run, res *Result) {
	cl := r.claims
	if cl == nil {
		return
	}
	res.check("minority claims: keys of unreachable members "+cl.node+" named itself owner of while it saw no majority",
		fmt.Sprintf("%s, in %d of %d rounds without a majority", keyList(cl.taken, cl.keys), cl.minority, cl.rounds), "0", len(cl.taken) == 0, true)
	res.check("the same while its view still showed a majority (not yet all suspect)",
		fmt.Sprintf("%s, in %d rounds", keyList(cl.stale, cl.keys), cl.rounds-cl.minority), "reported", true, false)
}

// keyList is "n of m keys (first at t: k1 k2 ...)".
func keyList(m map[string]time.Duration, of int) string {
	out := fmt.Sprintf("%d of %d keys", len(m), of)
	if len(m) == 0 {
		return out
	}
	ks := make([]string, 0, len(m))
	earliest := time.Duration(-1)
	for k, at := range m {
		ks = append(ks, k)
		if earliest < 0 || at < earliest {
			earliest = at
		}
	}
	sort.Strings(ks)
	return out + fmt.Sprintf(" (first at %.2fs: %s)", earliest.Seconds(), strings.Join(first(ks, 5), " "))
}
