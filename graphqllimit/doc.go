// Package graphqllimit limits the fields of a GraphQL server made with
// gqlgen (github.com/99designs/gqlgen), over any limiter.Store: a
// ringlimit node, a fleet client, Redis, PostgreSQL, memory.
//
// Limits are declared on the schema with a directive (DirectiveSDL), in
// the options, or both (an option replaces the directive of its field):
//
//	directive @rateLimit(limit: String!, cost: Int = 1) on FIELD_DEFINITION
//
//	type Query {
//	  search(q: String!): [Item!]! @rateLimit(limit: "10/1m")
//	}
//
// and gqlgen.yml tells gqlgen to leave the directive to the Limiter,
// which reads it from the schema:
//
//	directives:
//	  rateLimit:
//	    skip_runtime: true
//
// The Limiter is a gqlgen extension; Limiter.HTTP gives it the client IP,
// the default key:
//
//	es := generated.NewExecutableSchema(generated.Config{Resolvers: r})
//	lim, err := graphqllimit.New(store, es, graphqllimit.Options{
//		Fields: []graphqllimit.Rule{
//			graphqllimit.Field("Mutation.login", limiter.Limit{Uses: 5, Window: 15 * time.Minute}),
//		},
//	})
//	srv := handler.New(es)
//	srv.AddTransport(transport.POST{})
//	srv.Use(lim)
//	http.Handle("/graphql", lim.HTTP(srv))
//
// # One store call per request
//
// Before any resolver runs, the Limiter walks the operation (fragments
// included, @skip and @include obeyed) and counts every limited field it
// selects in one ConsumeMany, under the key
// "graphql:Type.field:<client>": a field selected twice costs two uses (a
// limit bounds how often a request asks for a field; one selected inside
// a list is counted once, not once per item, as the count is made before
// the list exists). The batch is all or nothing, as every Store's is: when
// one field is over its limit, every limited field of the request is
// refused, and nothing is counted; fields without limits still resolve.
// With Options.SplitRefused a refused batch is counted again field by
// field (one store call each), so only the fields over their limits are
// refused.
//
// # Refusals
//
// A refused field's resolver does not run. The field resolves to null
// with a GraphQL error whose extensions say why:
//
//	{"message": "rate limit exceeded: Query.search, retry in 42 s",
//	 "path": ["search"],
//	 "extensions": {"code": "RATE_LIMITED", "retryAfter": 42,
//	   "retryAfterMs": 41250, "retryAt": "2026-01-01T09:01:00.000Z"}}
//
// retryAfter is whole seconds, rounded up and at least 1, as HTTP's
// Retry-After; retryAt is when the whole request would pass, on the
// store's clock. A non-null field's null propagates to its parent, as
// GraphQL says. A request with no client key follows OnMissingKey
// (default: CodeNoKey); a store failure follows OnStoreError (default:
// CodeUnavailable with the failure's correlationId, logged by
// fallback.FailureLog: the first at once, then at most one line every
// 10 s). A store wrapped by fallback.New answers with its policy instead:
// a refusal with Verdict.Failure is CodeUnavailable, except under
// fallback.Local, where it is a real count and RATE_LIMITED.
//
// # Keys
//
// The default key is the client IP Limiter.HTTP finds (IPv6 masked to
// Options.IPv6Prefix bits; X-Forwarded-For or Forwarded read only from
// Options.TrustedProxies), or a key a layer before put with WithClient
// (the user an authentication middleware found). Options.Key, or a
// Rule's Key, reads any other from the request's context.
package graphqllimit
