package sim

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestLeaseDebugSeed(t *testing.T) {
	if os.Getenv("LEASE_SEED") == "" {
		t.Skip()
	}
	var seed uint64
	fmt.Sscan(os.Getenv("LEASE_SEED"), &seed)
	res := Run(seed, Options{Leases: os.Getenv("LEASE_OFF") == "", Trace: true})
	fmt.Println(res.Reason())
	fmt.Printf("plan: nodes %d uses %d window %v faults %+v repl %d\n", res.Plan.Nodes, res.Plan.Uses, res.Plan.Window, res.Plan.Faults, res.Plan.Replication)
	key := os.Getenv("LEASE_KEY")
	for _, l := range res.Trace[key] {
		if strings.Contains(l, "ADMITTED") || strings.Contains(l, "lease") || strings.Contains(l, "hand") || strings.Contains(l, "ring") {
			fmt.Println(l)
		}
	}
}
