package fallback

import (
	"strconv"

	"github.com/ringlimit/ringlimit/limiter"
)

// Policy decides a call the wrapped store did not answer in time (or
// answered with an error). The zero value is Deny: a store failure never
// silently lets calls through.
type Policy uint8

const (
	// Deny refuses the call; the verdict's Failure is set, so HTTP answers
	// 503 rather than 429.
	Deny Policy = iota
	// Allow lets the call through uncounted (Allowed true, Failure set).
	Allow
	// Local counts the call in a process-local store, under the limit
	// divided by the live members (Config.Share), rounded up.
	Local
	numPolicies
)

var policyNames = [numPolicies]string{"deny", "allow", "local"}

// String returns "deny", "allow" or "local".
func (p Policy) String() string {
	if p < numPolicies {
		return policyNames[p]
	}
	return "Policy(" + strconv.Itoa(int(p)) + ")"
}

// Valid reports whether p is Deny, Allow or Local.
func (p Policy) Valid() bool { return p < numPolicies }

// ParsePolicy reads "deny", "allow" or "local". Any other word, the empty
// string included, is an *limiter.InputError on the field "policy": an
// unknown policy is a configuration error, never a silent default.
func ParsePolicy(s string) (Policy, error) {
	for i, n := range policyNames {
		if s == n {
			return Policy(i), nil
		}
	}
	return 0, &limiter.InputError{Field: "policy", Reason: strconv.Quote(s) + " is not a failure policy (want deny, allow or local)"}
}

// MarshalText writes the policy's name.
func (p Policy) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, &limiter.InputError{Field: "policy", Reason: "unknown policy " + strconv.Itoa(int(p))}
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a policy with ParsePolicy, so a configuration file
// or flag with an unknown word is an error.
func (p *Policy) UnmarshalText(b []byte) error {
	v, err := ParsePolicy(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
