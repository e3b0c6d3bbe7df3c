// Package sabotage holds the test-only switches that turn one of the
// cluster's protections off, so that the chaos suite can show that each of
// its checks fails without the protection it claims to check (CHAOS.md,
// "Sabotage runs").
//
// A switch is on only when the node's environment variable
// RINGLIMIT_SABOTAGE names it (a comma list), read once at start. It is
// never a flag, never in Config and never documented as an option: a node
// with a switch on is deliberately broken and logs a warning at start
// saying so. Production code asks On(name) at the one place each
// protection lives.
package sabotage
