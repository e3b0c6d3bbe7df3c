package limiter

import "unicode/utf8"

// MaxNameBytes is the longest Limit.Name.
const MaxNameBytes = 128

// CheckName validates a Limit.Name: at most MaxNameBytes of valid UTF-8
// (a Prometheus label value must be UTF-8), naming the field "name".
//
// A name labels a limit in metrics (ringlimit_decisions_total{limit}) and
// logs. Names come from configuration, an httplimit rule's name or an
// Envoy descriptor's keys, never from a key, so the labels stay few; ""
// is an unnamed limit. A name does not name the counter: a counter is its
// key, algorithm and window, so limits that differ only by Name count in
// the same counters, and renaming a limit keeps its counts.
func CheckName(name string) error {
	if len(name) > MaxNameBytes {
		return invalid("name", "%d bytes, longer than %d", len(name), MaxNameBytes)
	}
	if !utf8.ValidString(name) {
		return invalid("name", "%q is not valid UTF-8", name)
	}
	return nil
}
