// Package chaos is ringlimit's chaos suite: it starts a cluster of real
// ringlimit processes, drives load through every node, injects faults
// (SIGKILL, SIGSTOP, graceful leave, rolling restart, join, network
// partition), records every call, and checks the history against the
// promises the cluster makes.
package chaos
