package client

// IgnorePushes makes c drop the invalidations the nodes push, so a test
// sees what the client does on its own (a push may arrive late).
func IgnorePushes(c *Client) { c.ignorePushes.Store(true) }
