// Package storetest is the conformance suite every limiter.Store of
// ringlimit runs: the in-memory store, cluster nodes, a fleet client, and
// the Redis, PostgreSQL, MySQL and SQLite adapters. Like net/http/httptest
// it is a test helper shipped as a package, so a store written outside this
// module can prove it keeps the same contract:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) limiter.Store {
//			s := mystore.New(...)
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The suite uses real time with short windows and a unique key per case,
// so it can run against a database that outlives the test. It checks every
// rule of the store contract for every algorithm.
package storetest
