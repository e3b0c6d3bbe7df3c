package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/buraksezer/consistent"
	"github.com/cespare/xxhash/v2"
)

var (
	// ErrEmpty is returned by New for an empty member set, and by the
	// methods of a nil *Ring: an empty ring has no owner for any key.
	ErrEmpty = errors.New("ring: no members")

	// ErrInvalidMember is returned by New for an empty member name.
	ErrInvalidMember = errors.New("ring: invalid member name")

	// ErrLoad is returned by New when the members cannot hold the partitions
	// within the load bound (too many members for Config.PartitionCount, or
	// Config.Load too tight). Raise PartitionCount or Load.
	ErrLoad = errors.New("ring: load bound cannot be met")
)

// Ring is an immutable consistent-hash ring snapshot. It is safe for
// concurrent use. A nil *Ring behaves as an empty ring: lookups return
// ErrEmpty, Len is 0.
type Ring struct {
	cfg     Config   // with defaults applied
	members []string // sorted by name
	owners  []string // partition ID -> owner; strings shared with members
	// order lists the members by the hash of their names: the circle that
	// Successors walks from the owner. pos maps a member to its index there.
	order   []string
	pos     map[string]int
	version uint64
}

// member adapts a name to consistent.Member.
type member string

func (m member) String() string { return string(m) }

// hasher adapts xxhash to consistent.Hasher.
type hasher struct{}

func (hasher) Sum64(b []byte) uint64 { return xxhash.Sum64(b) }

// New builds a ring over members, which are deduplicated and sorted, so any
// order or repetition of the same set gives the same ring. It returns
// ErrEmpty for no members, ErrInvalidMember for an empty name, a
// *ConfigError for a bad cfg, and ErrLoad when the load bound cannot be met.
// New never panics. The caller keeps ownership of the members slice.
func New(members []string, cfg Config) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()

	names := slices.Clone(members)
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) == 0 {
		return nil, ErrEmpty
	}
	if names[0] == "" {
		return nil, fmt.Errorf("%w: empty name", ErrInvalidMember)
	}
	// consistent gives each member ceil(floor(P/M) * Load) partitions at
	// most; check up front so the common mistakes get a clear error.
	perMember := math.Ceil(float64(cfg.PartitionCount/len(names)) * cfg.Load)
	if perMember*float64(len(names)) < float64(cfg.PartitionCount) {
		return nil, fmt.Errorf("%w: %d members with PartitionCount %d and Load %v hold at most %v partitions each",
			ErrLoad, len(names), cfg.PartitionCount, cfg.Load, perMember)
	}

	owners, err := placePartitions(names, cfg)
	if err != nil {
		return nil, err
	}

	r := &Ring{
		cfg:     cfg,
		members: names,
		owners:  owners,
		order:   slices.Clone(names),
		pos:     make(map[string]int, len(names)),
		version: version(names, cfg),
	}
	// The order GetClosestN of consistent uses: ascending xxhash of the name.
	sort.SliceStable(r.order, func(i, j int) bool {
		return xxhash.Sum64String(r.order[i]) < xxhash.Sum64String(r.order[j])
	})
	for i, m := range r.order {
		r.pos[m] = i
	}
	return r, nil
}

// placePartitions runs consistent's bounded-load placement and copies the
// result into a table, so lookups need neither its lock nor an interface.
// consistent panics when it cannot place a partition; that becomes ErrLoad.
func placePartitions(names []string, cfg Config) (owners []string, err error) {
	defer func() {
		if p := recover(); p != nil {
			owners, err = nil, fmt.Errorf("%w: %v", ErrLoad, p)
		}
	}()
	ms := make([]consistent.Member, len(names))
	for i, n := range names {
		ms[i] = member(n)
	}
	c := consistent.New(ms, consistent.Config{
		Hasher:            hasher{},
		PartitionCount:    cfg.PartitionCount,
		ReplicationFactor: cfg.ReplicationFactor,
		Load:              cfg.Load,
	})
	// Intern the owner strings to the sorted names.
	index := make(map[string]string, len(names))
	for _, n := range names {
		index[n] = n
	}
	owners = make([]string, cfg.PartitionCount)
	for p := range owners {
		m := c.GetPartitionOwner(p)
		if m == nil {
			return nil, fmt.Errorf("%w: partition %d has no owner", ErrLoad, p)
		}
		owners[p] = index[m.String()]
	}
	return owners, nil
}

// version hashes the sorted names and the config. Names are length-prefixed
// so that {"ab","c"} and {"a","bc"} differ.
func version(names []string, cfg Config) uint64 {
	d := xxhash.New()
	var buf [binary.MaxVarintLen64]byte
	_, _ = d.WriteString("ringlimit/ring/v1")
	for _, v := range []uint64{uint64(cfg.PartitionCount), uint64(cfg.ReplicationFactor), math.Float64bits(cfg.Load), uint64(len(names))} {
		_, _ = d.Write(binary.AppendUvarint(buf[:0], v))
	}
	for _, n := range names {
		_, _ = d.Write(binary.AppendUvarint(buf[:0], uint64(len(n))))
		_, _ = d.WriteString(n)
	}
	return d.Sum64()
}

// RoutingKey returns the part of key that decides its owner: the tag of the
// first "{tag}" in key when that tag is non-empty (the first '{' and the first
// '}' after it), else the whole key. It does not allocate.
//
//	RoutingKey("{user1}:login") == "user1"
//	RoutingKey("a{b}c{d}")      == "b"
//	RoutingKey("{}x{y}")        == "{}x{y}" // empty first tag: whole key
func RoutingKey(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key
				}
				return key[i+1 : j]
			}
		}
		return key
	}
	return key
}

// partition returns the partition of key, as consistent's FindPartitionID
// would: xxhash64 of the routing key modulo the partition count.
func (r *Ring) partition(key string) int {
	return int(xxhash.Sum64String(RoutingKey(key)) % uint64(len(r.owners)))
}

// Owner returns the member that owns key (by its RoutingKey). It does not
// allocate. The only error is ErrEmpty, from a nil Ring.
func (r *Ring) Owner(key string) (string, error) {
	if r == nil {
		return "", ErrEmpty
	}
	return r.owners[r.partition(key)], nil
}

// Successors returns up to n distinct members for key: its owner first, then
// the members that follow the owner on the circle of member-name hashes. When
// n exceeds Len it returns all members; n <= 0 returns an empty slice. The
// slice is newly allocated and belongs to the caller. The only error is
// ErrEmpty, from a nil Ring.
func (r *Ring) Successors(key string, n int) ([]string, error) {
	if r == nil {
		return nil, ErrEmpty
	}
	return r.AppendSuccessors(make([]string, 0, max(0, min(n, len(r.order)))), key, n)
}

// AppendSuccessors is Successors appending to dst (a replicator reuses one
// slice for every counter it ships).
func (r *Ring) AppendSuccessors(dst []string, key string, n int) ([]string, error) {
	if r == nil {
		return dst, ErrEmpty
	}
	n = max(0, min(n, len(r.order)))
	start := r.pos[r.owners[r.partition(key)]]
	for i := range n {
		dst = append(dst, r.order[(start+i)%len(r.order)])
	}
	return dst, nil
}

// Members returns the member names, sorted. The slice belongs to the caller.
func (r *Ring) Members() []string {
	if r == nil {
		return nil
	}
	return slices.Clone(r.members)
}

// Len returns the number of members.
func (r *Ring) Len() int {
	if r == nil {
		return 0
	}
	return len(r.members)
}

// Has reports whether member is in the ring.
func (r *Ring) Has(member string) bool {
	if r == nil {
		return false
	}
	_, ok := slices.BinarySearch(r.members, member)
	return ok
}

// Version identifies the placement: a hash of the sorted member set and the
// Config. The same members and Config give the same Version on every node;
// different member sets give different versions (up to 64-bit hash
// collisions). A nil Ring has Version 0.
func (r *Ring) Version() uint64 {
	if r == nil {
		return 0
	}
	return r.version
}

// Config returns the configuration the ring was built with, defaults applied.
func (r *Ring) Config() Config {
	if r == nil {
		return Config{}.withDefaults()
	}
	return r.cfg
}

// String returns a short description for logs: the version in hex and the
// members, e.g. "ring 9f86d081884c7d65 [a b c]".
func (r *Ring) String() string {
	if r == nil {
		return "ring(empty)"
	}
	return fmt.Sprintf("ring %016x %v", r.version, r.members)
}
