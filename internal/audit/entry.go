package audit

import (
	"slices"
	"time"

	"github.com/protctl/protctl/internal/repair"
)

// Key is the stream that holds the audit log.
const Key = "protctl:audit"

// Entry is one applied repair. Its JSON form (lowerCamelCase) is what the
// stream's "entry" field holds and what `audit ls -o json` prints; fields
// are only ever added.
type Entry struct {
	// ID is the stream entry id (the server's clock), set by List.
	ID string `json:"id,omitempty"`
	// Time is when the apply finished (the recording host's clock, UTC).
	Time time.Time `json:"time"`
	// StartedAt is when the apply started.
	StartedAt time.Time `json:"startedAt"`
	// User is the operating-system user who ran protctl.
	User string `json:"user"`
	// Host is the machine protctl ran on.
	Host string `json:"host"`
	// Context is the protctl context in use; "" for none.
	Context string `json:"context"`
	// CommandLine is the invocation with secrets redacted (RedactArgs),
	// or, for an apply made through the dashboard, the equivalent
	// command of the plan it applied (repair.ApplyOptions.CommandLine).
	CommandLine string `json:"commandLine"`
	// Via is the invocation the apply came through when CommandLine is
	// an equivalent command (e.g. "protctl tui"); omitted otherwise.
	Via string `json:"via,omitempty"`
	// Version is protctl's version.
	Version string `json:"version"`
	// Layout is the plan's key layout.
	Layout string `json:"layout"`
	// Actions are the plan's distinct actions, in the order of the items.
	Actions []string `json:"actions"`
	// Outcome is the apply's outcome (applied, conflict, refused, partial)
	// or "error" when it stopped on Error before the last item, or
	// "started" for the entry recorded before the first item of a
	// resumable plan's apply (OutcomeStarted).
	Outcome string `json:"outcome"`
	// ExitCode is what the CLI exits with for this outcome.
	ExitCode int `json:"exitCode"`
	// Error is why the apply stopped early; "" when it went through.
	Error string `json:"error,omitempty"`
	// Summary counts the items by result ("2 applied, 1 conflict").
	Summary string `json:"summary"`
	// PlanCreatedAt is when the plan was made (a saved plan may be old).
	PlanCreatedAt time.Time `json:"planCreatedAt"`
	// PlanID is the plan's id (parked retry and skip plans): the applies
	// of one plan (an interrupted run and its resumption) share it.
	PlanID string `json:"planId,omitempty"`
	// Items are the plan's items with their preconditions, parameters,
	// verdicts and results; at most the Recorder's MaxItems, the rest
	// counted in ItemsOmitted (Summary counts them all).
	Items        []repair.Item `json:"items"`
	ItemsOmitted int           `json:"itemsOmitted,omitempty"`
	// Invalid says why a stream entry could not be decoded (List fills
	// what the flat fields hold); "" for a valid entry.
	Invalid string `json:"invalid,omitempty"`
}

// Origin is who and where an apply ran: the same for every apply of one
// process.
type Origin struct {
	User        string
	Host        string
	Context     string
	CommandLine string
	Version     string
}

// OutcomeError is Entry.Outcome for an apply that stopped on an error.
const OutcomeError = "error"

// OutcomeStarted is Entry.Outcome of the entry recorded when an apply of
// a resumable plan starts (Recorder.RecordStart); its ExitCode is 0 and
// means nothing, its items have no results.
const OutcomeStarted = "started"

// newEntry builds the entry of a; maxItems <= 0 keeps every item.
func newEntry(o Origin, a repair.Applied, maxItems int) Entry {
	p := a.Plan
	e := Entry{
		Time:          a.FinishedAt.UTC(),
		StartedAt:     a.StartedAt.UTC(),
		User:          o.User,
		Host:          o.Host,
		Context:       o.Context,
		CommandLine:   o.CommandLine,
		Version:       o.Version,
		Layout:        p.Layout,
		Actions:       []string{},
		Outcome:       string(a.Outcome),
		ExitCode:      a.Outcome.ExitCode(),
		Summary:       p.Summary(),
		PlanCreatedAt: p.CreatedAt.UTC(),
		PlanID:        p.ID,
		Items:         p.Items,
	}
	if a.Err != nil {
		e.Outcome, e.Error, e.ExitCode = OutcomeError, a.Err.Error(), exitCode(a.Err)
	}
	if a.CommandLine != "" {
		// The dashboard's apply is audited as the command it stands for,
		// target included, as the CLI's is.
		e.CommandLine, e.Via = redactURL(a.CommandLine), o.CommandLine
	}
	seen := map[repair.Action]bool{}
	for _, it := range p.Items {
		if !seen[it.Action] {
			seen[it.Action] = true
			e.Actions = append(e.Actions, string(it.Action))
		}
	}
	if maxItems > 0 && len(e.Items) > maxItems {
		e.ItemsOmitted = len(e.Items) - maxItems
		e.Items = e.Items[:maxItems]
	}
	// A reason is free text an operator typed (--reason): a URL in it
	// loses its password as on the command line. A copy, since the plan
	// is the caller's.
	e.Items = slices.Clone(e.Items)
	for i := range e.Items {
		e.Items[i].Params.Reason = redactURL(e.Items[i].Params.Reason)
	}
	if e.Items == nil {
		e.Items = []repair.Item{}
	}
	return e
}
