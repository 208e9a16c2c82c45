package topic

import (
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/protctl/protctl/pkg/runtime"
)

// The conversion compiles only while runtime.Header and kgo.RecordHeader
// have identical fields (names, types, order), which is what makes the
// slice conversion in kafkaHeaders sound: same element layout, same
// length, no copy.
var _ = runtime.Header(kgo.RecordHeader{})

// kafkaHeaders returns a view over a Kafka record's headers (no copy): a
// handler reads the record's own bytes. Building a runtime.Headers by
// copying would cost an allocation per record, which the topic runtime's
// throughput cannot afford (see runtime.Headers).
func kafkaHeaders(h []kgo.RecordHeader) runtime.Headers {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*runtime.Header)(unsafe.Pointer(unsafe.SliceData(h))), len(h))
}
