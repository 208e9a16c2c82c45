package handlers

// RestartDelay is restartDelay, for the tests.
var RestartDelay = restartDelay

// InFlight returns the process handler's in-flight slots, for the tests.
func (p *Process) InFlight() *Slots { return p.slots }
