package partitioned

import "github.com/protctl/protctl/pkg/runtime/pause"

// PauseSelectorsSeen returns the selectors of the pause entries p has
// read, so that a test knows a pause reached the node before it publishes.
func PauseSelectorsSeen(p *Subscription) []pause.Selector {
	p.pauses.mu.Lock()
	defer p.pauses.mu.Unlock()
	var out []pause.Selector
	for _, e := range p.pauses.set {
		out = append(out, e.Selector)
	}
	return out
}
