package ringlimit_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/httplimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// Embedding a node: the service instance joins the others and every
// instance counts each key at its one owner.
func ExampleStart() {
	ctx := context.Background()
	node, err := ringlimit.Start(ctx, ringlimit.Config{
		Name: "api-1", Join: []string{"10.0.0.2:7946"}, // the other instances' gossip addresses
	})
	if err != nil {
		panic(err)
	}
	defer node.Close(context.Background())

	login := limiter.Limit{Uses: 5, Window: 15 * time.Minute} // sliding log: exact
	v, err := limiter.Consume(ctx, node, "login:alice", login)
	if err == nil && !v.Allowed {
		fmt.Println("try again in", v.RetryAfter)
	}
}

// HTTP middleware in front of a node.
func Example_httplimit() {
	node, err := ringlimit.Start(context.Background(), ringlimit.Config{})
	if err != nil {
		panic(err)
	}
	login := limiter.Limit{Uses: 5, Window: 15 * time.Minute}
	mw, err := httplimit.New(node, httplimit.Options{
		Limit:  limiter.Limit{Algorithm: limiter.SlidingWindow, Uses: 100, Window: time.Minute},
		Routes: []httplimit.Rule{httplimit.Route("POST /login", login), httplimit.Exempt("GET /healthz")},
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	_ = http.ListenAndServe(":8080", mw(mux))
}

// Calling the JSON API of a fleet with TLS, whose HTTP port serves HTTPS
// and wants the client certificate (and the token, when the fleet has one).
func ExampleClientTLS() {
	sec := ringlimit.Security{CertFile: "client.crt", KeyFile: "client.key", CAFile: "ca.crt", AuthToken: "s3cret"}
	tlsCfg, err := ringlimit.ClientTLS(sec)
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	req, _ := http.NewRequest("POST", "https://127.0.0.1:7948/v1/consume",
		strings.NewReader(`{"entries":[{"key":"user:42","limit":"5/1m"}]}`))
	req.Header.Set("Authorization", "Bearer "+sec.AuthToken)
	resp, err := client.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Status)
}
