package testserver

import (
	"context"
	"sync/atomic"
)

// Resolver answers the test schema and counts the resolver calls, so a
// test can see that a refused field's resolver did not run.
type Resolver struct {
	Searches atomic.Int64
	Reports  atomic.Int64
	Logins   atomic.Int64
}

// New returns the executable schema over r.
func New(r *Resolver) Config { return Config{Resolvers: r} }

func (r *Resolver) Query() QueryResolver       { return (*queryResolver)(r) }
func (r *Resolver) Mutation() MutationResolver { return (*mutationResolver)(r) }

type queryResolver Resolver

func (r *queryResolver) Hello(context.Context) (string, error) { return "hello", nil }

func (r *queryResolver) Search(_ context.Context, q string) ([]*Item, error) {
	r.Searches.Add(1)
	one, two := 1, 2
	return []*Item{{ID: q + "-1", Price: &one}, {ID: q + "-2", Price: &two}}, nil
}

func (r *queryResolver) Report(context.Context) (*string, error) {
	r.Reports.Add(1)
	s := "report"
	return &s, nil
}

func (r *queryResolver) Items(context.Context) ([]*Item, error) {
	three := 3
	return []*Item{{ID: "a", Price: &three}}, nil
}

type mutationResolver Resolver

func (r *mutationResolver) Login(context.Context, string) (bool, error) {
	r.Logins.Add(1)
	return true, nil
}
