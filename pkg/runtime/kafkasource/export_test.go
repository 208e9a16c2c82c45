package kafkasource

// Polling reports whether a Poll of r is under way past the point where
// an assignment change or Close interrupts it (its cancel is published):
// the state a test waits for before it interrupts a blocked Poll.
func Polling(r *Reader) bool {
	r.cancelMu.Lock()
	defer r.cancelMu.Unlock()
	return r.cancelPoll != nil
}
