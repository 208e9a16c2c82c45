package partitioned

import "context"

// SetRenewGate installs a hook the renewer calls before every renewal
// round; blocking in it stalls renewals (a node whose renewals are
// blocked). Call it before Start.
func SetRenewGate(p *Subscription, gate func(ctx context.Context)) { p.renewGate = gate }

// StreamKeys exposes streamKeys (discover.go) to the tests.
var StreamKeys = streamKeys

// Announced says whether every category's appends are announced, so
// that the wait loops check instead of waiting (announce.go).
func Announced(p *Subscription) bool {
	live, _ := p.announced.state()
	return live
}
