package ring

import (
	"errors"
	"fmt"
	"math"
)

// Defaults used for zero Config fields.
const (
	DefaultPartitionCount    = 271
	DefaultReplicationFactor = 20
	DefaultLoad              = 1.25
)

// Config tunes the placement. The zero value is valid and means the defaults.
// Every node of a cluster must use the same Config, or their rings disagree
// (Version includes the Config, so the disagreement is visible).
type Config struct {
	// PartitionCount is the number of partitions keys are hashed onto; a
	// partition is the unit of ownership, so it bounds how evenly keys
	// spread and how finely they move when members change. A prime spreads
	// best. Default 271. Must be at least the number of members.
	PartitionCount int

	// ReplicationFactor is the number of points each member gets on the
	// hash circle (virtual nodes); more points give a more even spread and
	// a slower New. Default 20. It is not the number of copies of data.
	ReplicationFactor int

	// Load bounds how many partitions one member may own, as a multiple of
	// the average (PartitionCount / members). Default 1.25. Must be at least
	// 1 (a bound below the average cannot be met).
	Load float64
}

// ErrInvalidConfig is matched (errors.Is) by every *ConfigError.
var ErrInvalidConfig = errors.New("ring: invalid config")

// ConfigError reports a Config field with a value New cannot use.
type ConfigError struct {
	Field  string // the field's name, e.g. "Load"
	Value  any    // the rejected value
	Reason string // what a valid value looks like
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("ring: invalid Config.%s %v: %s", e.Field, e.Value, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Validate reports the first field that New would reject, as a *ConfigError.
// Zero fields are valid: they take their defaults.
func (c Config) Validate() error {
	if c.PartitionCount < 0 {
		return &ConfigError{Field: "PartitionCount", Value: c.PartitionCount, Reason: "must be >= 1 (0 means 271)"}
	}
	if c.ReplicationFactor < 0 {
		return &ConfigError{Field: "ReplicationFactor", Value: c.ReplicationFactor, Reason: "must be >= 1 (0 means 20)"}
	}
	if c.Load != 0 && (math.IsNaN(c.Load) || math.IsInf(c.Load, 0) || c.Load < 1) {
		return &ConfigError{Field: "Load", Value: c.Load, Reason: "must be a finite number >= 1 (0 means 1.25)"}
	}
	return nil
}

// withDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.PartitionCount == 0 {
		c.PartitionCount = DefaultPartitionCount
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = DefaultReplicationFactor
	}
	if c.Load == 0 {
		c.Load = DefaultLoad
	}
	return c
}
