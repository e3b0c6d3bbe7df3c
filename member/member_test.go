package member_test

import (
	"fmt"
	"testing"

	"github.com/ringlimit/ringlimit/member"
)

func TestInRing(t *testing.T) {
	for _, tt := range []struct {
		state string
		want  bool
	}{
		{member.StateAlive, true},
		{member.StateSuspect, true},
		{member.StateDead, false},
		{member.StateLeft, false},
		{"", false},
		{"ALIVE", false},
	} {
		if got := (member.Member{Name: "n", State: tt.state}).InRing(); got != tt.want {
			t.Errorf("Member{State: %q}.InRing() = %v, want %v", tt.state, got, tt.want)
		}
	}
}

func ExampleMember_InRing() {
	members := []member.Member{
		{Name: "node-a", State: member.StateAlive},
		{Name: "node-b", State: member.StateSuspect},
		{Name: "node-c", State: member.StateDead},
	}
	for _, m := range members {
		fmt.Println(m.Name, m.InRing())
	}
	// Output:
	// node-a true
	// node-b true
	// node-c false
}
