package api_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/ringlimit/ringlimit/examples/http/api"
	"github.com/ringlimit/ringlimit/limiter"
)

func ExampleNewHandler() {
	store := limiter.NewMemory(limiter.MemoryConfig{})
	defer store.Close()
	h := api.NewHandler(store)

	for range 6 {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/login", nil)
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Remaining"))
	}
	// Output:
	// 200 4
	// 200 3
	// 200 2
	// 200 1
	// 200 0
	// 429 0
}
