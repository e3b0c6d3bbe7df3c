// Package testserver is a small gqlgen server for graphqllimit's tests:
// schema.graphqls, the code gqlgen generated from it (generated.go,
// models_gen.go) and hand-written resolvers (resolver.go).
package testserver

//go:generate go run github.com/99designs/gqlgen generate --config gqlgen.yml
