package topic

import ()

// window tracks the delivered records not done yet, in delivery (offset)
// order, to find the low watermark. Each record has a sequence number;
// marking it done is O(1) and the low watermark advances over the done
// prefix.
type window struct {
	base  int64 // sequence number of offs[start]
	offs  []int64
	done  []bool
	start int
}

func (w *window) push(off int64) int64 {
	seq := w.base + int64(len(w.offs)-w.start)
	w.offs = append(w.offs, off)
	w.done = append(w.done, false)
	return seq
}

func (w *window) markDone(seq int64) {
	i := w.start + int(seq-w.base)
	if i < w.start || i >= len(w.offs) {
		return
	}
	w.done[i] = true
	for w.start < len(w.offs) && w.done[w.start] {
		w.start++
		w.base++
	}
	if w.start == len(w.offs) {
		w.offs, w.done, w.start = w.offs[:0], w.done[:0], 0
	} else if w.start >= 1024 && 2*w.start >= len(w.offs) {
		n := copy(w.offs, w.offs[w.start:])
		copy(w.done, w.done[w.start:])
		w.offs, w.done, w.start = w.offs[:n], w.done[:n], 0
	}
}

// inflight counts the records from the oldest not done to the newest
// delivered.
func (w *window) inflight() int { return len(w.offs) - w.start }

// low is the checkpoint: the oldest offset not done, or next.
func (w *window) low(next int64) int64 {
	if w.start < len(w.offs) {
		return w.offs[w.start]
	}
	return next
}
