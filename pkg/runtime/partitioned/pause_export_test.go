package partitioned

import (
	"github.com/protctl/protctl/pkg/runtime"
)

// PauseSelectorsSeen returns the selectors of the pause entries p has
// read, so that a test knows a pause reached the node before it publishes.
func PauseSelectorsSeen(p *Subscription) []runtime.PauseSelector {
	p.pauses.mu.Lock()
	defer p.pauses.mu.Unlock()
	var out []runtime.PauseSelector
	for _, e := range p.pauses.set {
		out = append(out, e.Selector)
	}
	return out
}
