package client_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/client"
	"github.com/ringlimit/ringlimit/limiter"
	pb "github.com/ringlimit/ringlimit/rpc/ringlimitv1"
)

func ExampleDial() {
	ctx := context.Background()
	node, err := ringlimit.Start(ctx, ringlimit.Config{
		GossipAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", HTTPAddr: "-", Logger: quietLogger(),
	})
	if err != nil {
		panic(err)
	}
	defer node.Close(ctx)
	if err := node.WaitReady(ctx); err != nil {
		panic(err)
	}

	c, err := client.Dial(ctx, node.GRPCAddr()) // list every node of the fleet
	if err != nil {
		panic(err)
	}
	defer c.Close()
	login := limiter.Limit{Uses: 2, Window: time.Minute}
	for range 3 {
		v, err := limiter.Consume(ctx, c, "login:alice", login)
		if err != nil {
			panic(err)
		}
		fmt.Println(v.Allowed, v.Remaining)
	}
	// Output:
	// true 1
	// true 0
	// false 0
}

// A client of a fleet with mTLS and a bearer token, that gives late
// verdicts a second at most.
func ExampleDialConfig() {
	ctx := context.Background()
	c, err := client.DialConfig(ctx, client.Config{
		Addrs: []string{"10.0.0.5:7947", "10.0.0.6:7947"},
		Security: client.Security{
			CertFile: "client.crt", KeyFile: "client.key", CAFile: "ca.crt", AuthToken: "s3cret",
		},
		Timeout: time.Second,
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	v, err := limiter.Consume(ctx, c, "login:alice", limiter.Limit{Uses: 5, Window: 15 * time.Minute})
	if err == nil && !v.Allowed {
		fmt.Println("try again in", v.RetryAfter)
	}
}

// Any gRPC client of the fleet's API, with the fleet's credentials.
func ExampleCredentials() {
	opts, err := client.Credentials(client.Security{CertFile: "client.crt", KeyFile: "client.key", CAFile: "ca.crt", AuthToken: "s3cret"})
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("10.0.0.5:7947", opts...)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	resp, err := pb.NewLimiterClient(conn).Members(context.Background(), &pb.MembersRequest{})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(resp.GetMembers()), "members")
}

// Calling the JSON API of a fleet with TLS, whose HTTP port serves HTTPS
// and wants the client certificate (and the token, when the fleet has one).
func ExampleHTTPTLS() {
	sec := client.Security{CertFile: "client.crt", KeyFile: "client.key", CAFile: "ca.crt", AuthToken: "s3cret"}
	tlsCfg, err := client.HTTPTLS(sec)
	if err != nil {
		panic(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	req, _ := http.NewRequest("POST", "https://127.0.0.1:7948/v1/consume",
		strings.NewReader(`{"entries":[{"key":"user:42","limit":"5/1m"}]}`))
	req.Header.Set("Authorization", "Bearer "+sec.AuthToken)
	resp, err := hc.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}
