// Package throttle paces a log that an event can flood: the first event
// of a run gets a line at once, later ones at most one line every period,
// each saying how many events got none since the previous line.
//
// It is the pacing of fallback.FailureLog (a store outage fails every
// call) and of limiter's shadow log (in shadow mode every over-limit call
// would be refused): one mechanism, so both logs read alike. It imports
// nothing of ringlimit, so package limiter, a leaf, can use it.
package throttle
