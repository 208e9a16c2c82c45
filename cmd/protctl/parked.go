package main

import (
	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/runtime/ledger"
)

func newParkedCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List, show, retry and skip parked aggregates and partitions (the failure ledger)",
		Long: `protctl's runtime parks an aggregate (Kafka) or a partition (Redis) whose head
message keeps failing, in the failure ledger, and keeps the rest moving.
These commands read the ledger and record an operator's retry or skip; the
node that owns the partition acts on it under its own fence, now or when a
node next owns it.

A Protean partition halted on a poison message has no ledger entry: use
"protctl partitions skip-head" for it.`,
		Example: `  protctl parked ls
  protctl parked show app.OrderProjector o-1
  protctl parked retry app.OrderProjector o-1
  protctl parked skip app.OrderProjector o-1 --reason "bad amount, refunded by hand"
  protctl parked retry --subscription ledger-sync --error-class 'http POST http://billing' --rps 20 --yes`,
	}
	cmd.AddCommand(newParkedListCmd(f), newParkedShowCmd(f), newParkedRetryCmd(f), newParkedSkipCmd(f))
	return cmd
}

// parkedItem is a ledger entry as the CLI prints it: times in the
// contract's format, unknowns null.
type parkedItem struct {
	Subscription  string         `json:"subscription"`
	Source        string         `json:"source"`
	Aggregate     string         `json:"aggregate"`
	Category      *string        `json:"category"`
	Topic         *string        `json:"topic"`
	Partition     string         `json:"partition"`
	Position      string         `json:"position"`
	Stream        *string        `json:"stream"`
	Error         string         `json:"error"`
	Attempts      int            `json:"attempts"`
	ParkedAt      *string        `json:"parkedAt"`
	LastAttemptAt *string        `json:"lastAttemptAt"`
	Status        string         `json:"status"`
	Owner         *string        `json:"owner"`
	Generation    *int64         `json:"generation"`
	Request       *parkedRequest `json:"request"`
}

// parkedRequest is an operator's request not yet taken up by the owner.
type parkedRequest struct {
	Action      string  `json:"action"`
	Reason      *string `json:"reason"`
	By          *string `json:"by"`
	RequestedAt *string `json:"requestedAt"`
	// Plan is the id of the plan whose apply recorded the request (its
	// token in the ledger); null for a request made otherwise.
	Plan *string `json:"plan"`
}

func parkedItemOf(p ledger.Parked) parkedItem {
	it := parkedItem{
		Subscription:  p.Subscription,
		Source:        string(p.Source),
		Aggregate:     p.Aggregate,
		Category:      strOrNull(p.Category),
		Topic:         strOrNull(p.Topic),
		Partition:     p.Partition,
		Position:      p.Position,
		Stream:        strOrNull(p.Stream),
		Error:         p.Error,
		Attempts:      p.Attempts,
		ParkedAt:      output.TimestampOrNull(p.ParkedAt),
		LastAttemptAt: output.TimestampOrNull(p.LastAttemptAt),
		Status:        string(p.Status),
		Owner:         strOrNull(p.Owner),
	}
	if p.Generation != 0 {
		g := p.Generation
		it.Generation = &g
	}
	if r := p.Request; r != nil {
		it.Request = &parkedRequest{
			Action:      string(r.Action),
			Reason:      strOrNull(r.Reason),
			By:          strOrNull(r.By),
			RequestedAt: output.TimestampOrNull(r.RequestedAt),
			Plan:        strOrNull(r.Token),
		}
	}
	return it
}

func parkedStatusTone(s string) output.Tone {
	switch ledger.Status(s) {
	case ledger.StatusParked, ledger.StatusUnrecoverable:
		return output.ToneBad
	case ledger.StatusRetrying:
		return output.ToneWarn
	}
	return output.ToneNone
}
