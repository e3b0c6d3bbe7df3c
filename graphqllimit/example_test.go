package graphqllimit_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/ringlimit/ringlimit/graphqllimit"
	"github.com/ringlimit/ringlimit/graphqllimit/internal/testserver"
	"github.com/ringlimit/ringlimit/limiter"
)

// A gqlgen server whose schema limits Query.report to 1 per hour (its
// @rateLimit directive) and whose options limit Mutation.login: the
// second report of a client is refused with RATE_LIMITED and the wait.
func Example() {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	es := testserver.NewExecutableSchema(testserver.New(&testserver.Resolver{}))
	lim, err := graphqllimit.New(store, es, graphqllimit.Options{
		Fields: []graphqllimit.Rule{
			graphqllimit.Field("Mutation.login", limiter.Limit{Uses: 5, Window: 15 * time.Minute}),
		},
	})
	if err != nil {
		panic(err)
	}
	srv := handler.New(es)
	srv.AddTransport(transport.POST{})
	srv.Use(lim)
	ts := httptest.NewServer(lim.HTTP(srv))
	defer ts.Close()

	for range 2 {
		resp, err := http.Post(ts.URL, "application/json", bytes.NewBufferString(`{"query": "{ hello report }"}`))
		if err != nil {
			panic(err)
		}
		var out struct {
			Data   map[string]any
			Errors []struct {
				Message    string
				Extensions map[string]any
			}
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if len(out.Errors) == 0 {
			fmt.Println("report:", out.Data["report"])
			continue
		}
		e := out.Errors[0]
		fmt.Println("hello:", out.Data["hello"], "report:", out.Data["report"])
		// Whole seconds rounded up: an hour, give or take the time the
		// example took and the store's rounding to whole milliseconds.
		secs, _ := e.Extensions["retryAfter"].(float64)
		fmt.Println(e.Extensions["code"], "retry in about an hour:", secs > 3000 && secs <= 3601)
	}
	// Output:
	// report: report
	// hello: hello report: <nil>
	// RATE_LIMITED retry in about an hour: true
}
