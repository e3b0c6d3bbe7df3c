// Package member describes a node of a ringlimit cluster as its peers and
// its clients see it: a name on the ring, its addresses, its version and
// its state in the failure detector.
//
// It is a leaf: it imports nothing but the standard library, so that a
// fleet client (package client) can name members without the gossip
// library the nodes run (package cluster, whose Member and State
// constants are aliases of these).
package member
