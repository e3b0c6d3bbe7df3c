package ring_test

import (
	"fmt"

	"github.com/ringlimit/ringlimit/ring"
)

func Example() {
	r, err := ring.New([]string{"node-b", "node-a", "node-c"}, ring.Config{})
	if err != nil {
		panic(err)
	}
	a, _ := r.Owner("{user42}:login")
	b, _ := r.Owner("{user42}:api")
	fmt.Println("same owner for one hash tag:", a == b)

	replicas, _ := r.Successors("{user42}:login", 2)
	fmt.Println("owner first:", replicas[0] == a, "replicas:", len(replicas))

	all, _ := r.Successors("k", 10) // more than there are members: all of them
	fmt.Println(len(all), r.Members())

	_, err = ring.New(nil, ring.Config{})
	fmt.Println(err)
	_, err = ring.New([]string{"a"}, ring.Config{Load: 0.5})
	fmt.Println(err)
	// Output:
	// same owner for one hash tag: true
	// owner first: true replicas: 2
	// 3 [node-a node-b node-c]
	// ring: no members
	// ring: invalid Config.Load 0.5: must be a finite number >= 1 (0 means 1.25)
}

func ExampleRoutingKey() {
	fmt.Println(ring.RoutingKey("{user1}:a"))
	fmt.Println(ring.RoutingKey("plain-key"))
	fmt.Println(ring.RoutingKey("{}:empty-tag"))
	// Output:
	// user1
	// plain-key
	// {}:empty-tag
}
