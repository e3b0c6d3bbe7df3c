package cluster_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/ringlimit/ringlimit/cluster"
)

// Two nodes on one host: the second joins the first, and both route a key
// to the same owner. (No Output: it needs the network.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	a, err := cluster.Start(ctx, cluster.Config{
		Name:       "node-a",
		GossipAddr: "127.0.0.1:0", // any free port
		GRPCAddr:   "127.0.0.1:8081",
		Profile:    cluster.ProfileLocal,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()

	b, err := cluster.Start(ctx, cluster.Config{
		Name:       "node-b",
		GossipAddr: "127.0.0.1:0",
		GRPCAddr:   "127.0.0.1:8082",
		Profile:    cluster.ProfileLocal,
		Join:       []string{a.Local().GossipAddr},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Leave(ctx)

	changes, stop := a.Subscribe()
	defer stop()
	for ch := range changes {
		if ch.Next.Len() == 2 {
			break
		}
	}
	owner, _ := a.Ring().Owner("{user42}:login")
	m, _ := a.Member(owner)
	fmt.Println("forward to", m.GRPCAddr)
}
