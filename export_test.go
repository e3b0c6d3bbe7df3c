package ringlimit

import "github.com/ringlimit/ringlimit/owner"

// Crash stops a node as a SIGKILL would, for in-process tests: no
// hand-off, no leave message; its listeners close at once.
func Crash(n *Node) {
	n.closeOnce.Do(func() {
		close(n.closing)
		n.stopJoin()
		if n.holder != nil {
			n.holder.Abandon() // a killed process gives no lease back
		}
		n.grpcSrv.Stop()
		if n.httpSrv != nil {
			n.httpSrv.Close()
		}
		if c := n.members.Cluster(); c != nil {
			c.Close()
		}
		n.router.Close()
		n.fb.Close(closedContext())
		n.members.StopProbing()
		n.wg.Wait()
		n.engine.Close()
	})
}

// SetLeaseConfig replaces the node's lease settings (its book starts
// empty): for tests that need, say, a hold that outlives a crash.
func SetLeaseConfig(n *Node, cfg owner.LeaseConfig) {
	n.router.EnableLeases(cfg, n.recallLeases)
}
