package main

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"time"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/inspect"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/pkg/broker"
)

func newDLQCmd(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay and purge dead letters (C:K:dlq and Protean's C:dlq)",
		Long: `Dead letters are the entries moved aside so that a partition can go on:
"protctl partitions skip-head" and a node's skip write them to the
partition's C:K:dlq, and Protean writes its own to the category's C:dlq.
All are in Protean's format (the original entry with _dlq_metadata), so
Protean's "protean dlq" reads protctl's too; dead letters protctl wrote
before that format are read as well.

"dlq ls" lists a category's dead letters with where they came from, the
consumer group, the reason, their age and delivery count; "dlq show" shows
one. After the bug that failed them is fixed, "dlq replay" appends them back
to their partitions, where they are handled after the entries already there,
in the order replayed; "dlq purge" deletes the ones that will never succeed.
Both are plans first, like every change, and act on an entry only while it
is the one the plan saw.`,
		Example: `  protctl dlq ls shop::order
  protctl dlq ls shop::order --key 'o-1*' --reason 'amount' --older-than 1h -o json
  protctl dlq show shop::order 1719234567890-0
  protctl dlq replay shop::order --key o-1 --dry-run
  protctl dlq purge shop::order --reason '^poison' --yes`,
	}
	cmd.AddCommand(newDLQListCmd(f), newDLQShowCmd(f), newDLQReplayCmd(f), newDLQPurgeCmd(f))
	return cmd
}

// dlqFilter is the selection flags ls, replay and purge share.
type dlqFilter struct {
	Key       string
	Reason    string
	Group     string
	OlderThan time.Duration
	NewerThan time.Duration
	IDs       []string
}

func (fl *dlqFilter) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&fl.Key, "key", "", "only the dead letters of partitions whose key matches this glob (*, ?, [...]); leaves out the category's own C:dlq")
	f.StringVar(&fl.Reason, "reason", "", "only the dead letters whose reason matches this regular expression (RE2)")
	f.StringVar(&fl.Group, "group", "", "only this consumer group's dead letters (a group nothing records exits 4)")
	f.DurationVar(&fl.OlderThan, "older-than", 0, "only dead letters at least this old (e.g. 1h)")
	f.DurationVar(&fl.NewerThan, "newer-than", 0, "only dead letters less than this old (e.g. 30m)")
	f.StringSliceVar(&fl.IDs, "id", nil, "only these dead-letter ids (repeat or comma-separate)")
}

// query validates the flags (a usage error names the flag) and makes the
// inspect query.
func (fl *dlqFilter) query(category string) (inspect.DeadLetterQuery, error) {
	q := inspect.DeadLetterQuery{Category: category, Key: fl.Key, Group: fl.Group, OlderThan: fl.OlderThan, NewerThan: fl.NewerThan, IDs: fl.IDs}
	if _, err := path.Match(fl.Key, ""); err != nil {
		return q, usageError(fmt.Errorf("invalid --key %q: not a glob (*, ?, [...] and \\ escapes): %v", fl.Key, err))
	}
	if fl.Reason != "" {
		re, err := regexp.Compile(fl.Reason)
		if err != nil {
			return q, usageError(fmt.Errorf("invalid --reason %q: not a regular expression: %v", fl.Reason, err))
		}
		q.Reason = re
	}
	if fl.OlderThan < 0 || fl.NewerThan < 0 {
		return q, usageError(fmt.Errorf("invalid --older-than/--newer-than: want a positive duration"))
	}
	if fl.OlderThan > 0 && fl.NewerThan > 0 && fl.OlderThan >= fl.NewerThan {
		return q, usageError(fmt.Errorf("--older-than %s and --newer-than %s select nothing: want --older-than below --newer-than", fl.OlderThan, fl.NewerThan))
	}
	for _, id := range fl.IDs {
		if _, err := broker.ParseStreamID(id); err != nil {
			return q, usageError(fmt.Errorf("invalid --id %q: want a stream id <ms>-<seq>", id))
		}
	}
	return q, nil
}

// dlqItem is a dead letter as the CLI prints it (dlq ls, dlq show): the
// fields are API (docs/cli.md), unknowns null.
type dlqItem struct {
	Category       string  `json:"category"`
	Key            *string `json:"key"`
	Stream         string  `json:"stream"`
	ID             string  `json:"id"`
	DeadLetteredAt string  `json:"deadLetteredAt"`
	AgeMs          int64   `json:"ageMs"`
	OriginalStream *string `json:"originalStream"`
	OriginalID     *string `json:"originalId"`
	Group          *string `json:"group"`
	Consumer       *string `json:"consumer"`
	Reason         *string `json:"reason"`
	FailedAt       *string `json:"failedAt"`
	RetryCount     *int64  `json:"retryCount"`
	Missing        bool    `json:"missing"`
	Format         string  `json:"format"`
	// ReplayedFrom is set on a dead letter that had been replayed before.
	ReplayedFrom *dlqReplayedFrom `json:"replayedFrom"`
}

type dlqReplayedFrom struct {
	Stream string `json:"stream"`
	ID     string `json:"id"`
}

func dlqItemOf(d inspect.DeadLetter) dlqItem {
	it := dlqItem{
		Category:       d.Category,
		Key:            strOrNull(d.Key),
		Stream:         d.Stream,
		ID:             d.ID,
		DeadLetteredAt: output.Timestamp(d.DeadLetteredAt),
		AgeMs:          output.Ms(d.Age),
		OriginalStream: strOrNull(d.OriginalStream),
		OriginalID:     strOrNull(d.OriginalID),
		Group:          strOrNull(d.ConsumerGroup),
		Consumer:       strOrNull(d.Consumer),
		Reason:         strOrNull(d.FailureReason),
		RetryCount:     d.RetryCount,
		Missing:        d.Missing,
		Format:         string(d.Format),
	}
	if d.FailedAt != "" {
		if t, ok := broker.ParseFailedAt(d.FailedAt); ok {
			it.FailedAt = output.TimestampOrNull(t)
		} else {
			it.FailedAt = &d.FailedAt
		}
	}
	if r := d.ReplayedFrom; r != nil {
		it.ReplayedFrom = &dlqReplayedFrom{Stream: r.DLQStream, ID: r.DLQID}
	}
	return it
}

// dlqErr gives the dead-letter reads' errors their exit codes: an id in
// several streams is the operator's to narrow (2).
func dlqErr(err error) error {
	if errors.Is(err, inspect.ErrAmbiguous) {
		return clierr.Usage.Wrap(err)
	}
	return dataErr(err)
}
