package memorybroker_test

import (
	"testing"
	"time"

	"github.com/protctl/protctl/pkg/broker/brokertest"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestConformance(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Target {
		clock := memorybroker.NewManualClock(epoch)
		b := memorybroker.New(memorybroker.WithClock(clock))
		return brokertest.Target{Broker: b, Advance: clock.Advance, Faults: b.Faults()}
	})
}

func TestConformanceInline(t *testing.T) {
	brokertest.Run(t, func(t *testing.T) brokertest.Target {
		clock := memorybroker.NewManualClock(epoch)
		b := memorybroker.NewInline(memorybroker.WithClock(clock))
		return brokertest.Target{Broker: b, Advance: clock.Advance, Faults: b.Faults()}
	})
}
