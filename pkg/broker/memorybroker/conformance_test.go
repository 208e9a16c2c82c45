package memorybroker_test

import (
	"testing"

	"github.com/protctl/protctl/pkg/broker/brokertest"
	"github.com/protctl/protctl/pkg/broker/memorybroker"
)

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
