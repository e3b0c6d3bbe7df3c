package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// goleak's VerifyTestMain exits; run the tests, check, then remove
	// the e2e build directory.
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(
			// grpc's package-level goroutines
			goleak.IgnoreAnyFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}
