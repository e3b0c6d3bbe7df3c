package chaos_test

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/chaos"
)

// A limit of 2 per second; three admissions whose calls all started and
// ended within 30 ms: one beyond the limit, whatever the owner's clock said.
func ExampleCheckOvershoot() {
	ms := time.Millisecond
	calls := []chaos.Call{
		{Key: "k", Node: "n1", Start: 0, End: 5 * ms, Answered: true, Allowed: true},
		{Key: "k", Node: "n2", Start: 10 * ms, End: 15 * ms, Answered: true, Allowed: true},
		{Key: "k", Node: "n3", Start: 20 * ms, End: 30 * ms, Answered: true, Allowed: true},
		{Key: "k", Node: "n1", Start: 40 * ms, End: 45 * ms, Answered: true, Allowed: false},
	}
	o := chaos.CheckOvershoot(calls, 2, time.Second, nil)
	fmt.Printf("keys %d, max %d, total %d\n", o.Keys, o.Max, o.Total)
	// Output: keys 1, max 1, total 1
}
