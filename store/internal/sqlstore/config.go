package sqlstore

import (
	"fmt"
	"time"

	"github.com/ringlimit/ringlimit/limiter"
)

// DefaultTable is the table name when the configuration leaves it empty.
const DefaultTable = "ringlimit_counters"

// DefaultSweepInterval is how often the stores sweep expired rows unless
// configured otherwise.
const DefaultSweepInterval = time.Minute

// MaxTableLen leaves room for the "_log" and "_exp" suffixes of the other
// names within every database's identifier limit (PostgreSQL: 63 bytes).
const MaxTableLen = 48

// CheckTable validates a table name: a letter or underscore, then
// letters, digits or underscores, at most MaxTableLen bytes. Only such
// names are put into SQL, so they need no quoting. The error is a
// *limiter.InputError naming field.
func CheckTable(field, name string) error {
	bad := func(reason string, args ...any) error {
		return &limiter.InputError{Field: field, Reason: fmt.Sprintf(reason, args...)}
	}
	if name == "" {
		return bad("must not be empty")
	}
	if len(name) > MaxTableLen {
		return bad("%q is longer than %d bytes", name, MaxTableLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return bad("%q is not an identifier (a letter or _, then letters, digits or _)", name)
		}
	}
	return nil
}

// Table returns name, or DefaultTable when it is empty, checked.
func Table(field, name string) (string, error) {
	if name == "" {
		name = DefaultTable
	}
	return name, CheckTable(field, name)
}

// SweepInterval returns the configured interval with 0 meaning the
// default; a negative interval turns the sweeper off (returned as 0).
func SweepInterval(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultSweepInterval
	case d < 0:
		return 0
	}
	return d
}
