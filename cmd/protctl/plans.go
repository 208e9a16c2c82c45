package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
)

// mutation is what every mutator (reap, release, skip-head, prune-consumers, trim, parked
// retry and skip, apply) shares: the guard rails and the plan/apply flow.
// Build it in RunE with newMutation; runMutation does the rest:
//
//  1. unless --dry-run, refuse at once in read-only mode (exit 6);
//  2. build the plan (reads only);
//  3. --dry-run: print the plan (-o json is the file `apply -f` takes)
//     and exit with its predicted outcome: 0 when it would apply cleanly,
//     6 when every item would be refused, 7 when some would;
//  4. when some item is allowed: on a terminal show the plan on stderr and
//     ask; without one, --yes or exit 6 having changed nothing;
//  5. apply (each item's precondition re-checked atomically) and print
//     the plan with each item's result; exit 0, 5, 6 or 7 by the outcome.
//     The Repairer records the apply in the audit log when it tried an
//     item; a failed append is a warning on stderr (reportNotRecorded).
type mutation struct {
	IO            *output.IOStreams
	Printer       *output.Printer
	DryRun        bool
	Yes           bool
	CheckWritable func() error
	Confirm       func(context.Context, string) error
	Repairer      func() (*repair.Repairer, error)
	ApplyOptions  repair.ApplyOptions
}

func newMutation(f *Factory) *mutation {
	return &mutation{
		IO:            f.IOStreams,
		Printer:       f.Printer(),
		DryRun:        f.DryRun(),
		Yes:           f.assumeYes(),
		CheckWritable: f.CheckWritable,
		Confirm:       f.Confirm,
		Repairer:      f.Repairer,
	}
}

// runMutation plans with plan and then prints or applies the plan.
func runMutation(ctx context.Context, m *mutation, plan func(context.Context, *repair.Repairer) (*repair.Plan, error)) error {
	if !m.DryRun {
		if err := m.CheckWritable(); err != nil {
			return err
		}
	}
	r, err := m.Repairer()
	if err != nil {
		return err
	}
	p, err := plan(ctx, r)
	if err != nil {
		return dataErr(err)
	}
	return applyPlan(ctx, m, r, p)
}

// applyPlan is runMutation after planning (apply -f starts here).
func applyPlan(ctx context.Context, m *mutation, r *repair.Repairer, p *repair.Plan) error {
	if err := printSelection(m.IO, m.Printer, p); err != nil {
		return err
	}
	if m.DryRun {
		if err := printPlan(m.IO, m.Printer, p, true); err != nil {
			return err
		}
		return dryRunErr(p)
	}
	if n := present.Pending(p); n > 0 {
		if m.IO.CanPrompt() && !m.Yes {
			if err := previewPlan(m.IO, p); err != nil {
				return err
			}
		}
		if err := m.Confirm(ctx, applyQuestion(p, n)); err != nil {
			return err
		}
	}
	outcome, err := r.Apply(ctx, p, m.ApplyOptions)
	// A failed audit append is reported, and the repair's own result
	// (printed below, and the exit code) stands.
	err = reportNotRecorded(m.IO, m.Printer, err)
	if err != nil {
		// Show what was done before the failure, then fail with it.
		if perr := printPlan(m.IO, m.Printer, p, false); perr != nil {
			return errors.Join(dataErr(err), perr)
		}
		return dataErr(err)
	}
	if err := printPlan(m.IO, m.Printer, p, false); err != nil {
		return err
	}
	return outcomeErr(outcome, p)
}

// printSelection says first, on stderr, how many entries a filtered bulk
// plan holds and how they were chosen; in structured formats the
// document's selection (before its items) says it.
func printSelection(ios *output.IOStreams, pr *output.Printer, p *repair.Plan) error {
	sel := p.Selection
	if sel == nil || pr.Structured() {
		return nil
	}
	what := "every parked entry"
	if sel.Filter != nil && *sel.Filter != "" {
		what = "parked entries matching " + *sel.Filter
	}
	line := fmt.Sprintf("Selected %d %s", sel.Count, what)
	if sel.Matched > sel.Count {
		line = fmt.Sprintf("Selected %d of %d %s: the oldest, --max %d", sel.Count, sel.Matched, what, sel.Max)
	}
	line += fmt.Sprintf(" (ages at %s).", sel.At)
	_, err := fmt.Fprintln(ios.ErrOut, line)
	return err
}

// outcomeErr is the error (and so the exit code) of an apply's outcome,
// saying what happened in words: nil when every item applied or had
// nothing to do.
func outcomeErr(o repair.Outcome, p *repair.Plan) error {
	switch o {
	case repair.OutcomeApplied:
		return nil
	case repair.OutcomeConflict:
		return clierr.Conflict.Errorf("%s: the state moved since the plan, nothing was changed", p.Summary())
	case repair.OutcomeRefused:
		return clierr.Refused.Errorf("%s: nothing was changed", p.Summary())
	}
	if present.Pending(p) > 0 && failedItems(p) == 0 {
		return clierr.Partial.Errorf("partly applied: %s; apply the plan again (apply -f) for the rest", p.Summary())
	}
	return clierr.Partial.Errorf("partly applied: %s", p.Summary())
}

// failedItems counts the items an apply did not apply: conflicts and
// refusals.
func failedItems(p *repair.Plan) int {
	n := 0
	for _, it := range p.Items {
		if it.Result == repair.ResultConflict || it.Result == repair.ResultRefused {
			n++
		}
	}
	return n
}

func applyQuestion(p *repair.Plan, n int) string {
	refused := 0
	for _, it := range p.Items {
		if !it.Allowed && it.Result != repair.ResultSkipped {
			refused++
		}
	}
	q := fmt.Sprintf("Apply %d %s", n, present.Plural(n, "change", "changes"))
	if refused > 0 {
		q += fmt.Sprintf(" (%d refused by the plan)", refused)
	}
	return q + "?"
}

// dryRunErr is the exit of a dry run: nil when the plan would apply
// cleanly, else the predicted refusal or partial outcome, naming the
// first refused item's reason.
func dryRunErr(p *repair.Plan) error {
	var refused []repair.Item
	for _, it := range p.Items {
		if !it.Allowed && it.Result != repair.ResultSkipped {
			refused = append(refused, it)
		}
	}
	if len(refused) == 0 {
		return nil
	}
	why := fmt.Sprintf("%s: %s", refused[0].Target, refused[0].Reason)
	if len(refused) > 1 {
		why += fmt.Sprintf(" (and %d more)", len(refused)-1)
	}
	switch p.Predicted() {
	case repair.OutcomePartial:
		return clierr.Partial.Errorf("dry run: %d of %d items would be refused; %s", len(refused), len(p.Items), why)
	default:
		return clierr.Refused.Errorf("dry run: nothing would be applied; %s", why)
	}
}

// planDoc prints a plan as the document ParsePlan reads back: apiVersion
// and kind come from the printer (the embedded Plan's own are hidden by
// these empty, omitted fields of the same JSON names), and createdAt is
// the contract's RFC 3339 UTC with milliseconds.
type planDoc struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	CreatedAt  string `json:"createdAt"`
	*repair.Plan
}

// printPlan prints p to stdout: the plan document in structured formats,
// a table of its items otherwise (with a one-line summary on stderr).
func printPlan(ios *output.IOStreams, pr *output.Printer, p *repair.Plan, dryRun bool) error {
	if pr.Structured() {
		return pr.PrintObject(repair.PlanKind, planDoc{CreatedAt: output.Timestamp(p.CreatedAt), Plan: p}, nil)
	}
	if err := pr.PrintList("PlanItem", p.Items, planItemSpec(!dryRun, "The plan has no items: nothing to do.")); err != nil {
		return err
	}
	if len(p.Items) == 0 {
		return nil
	}
	summary := "Dry run, nothing was changed: " + predictedSummary(p) + "."
	if !dryRun {
		if present.Pending(p) > 0 || failedItems(p) > 0 {
			return nil // the command's error says what went wrong
		}
		summary = strings.ToUpper(p.Summary()[:1]) + p.Summary()[1:] + "."
	}
	_, err := fmt.Fprintln(ios.ErrOut, summary)
	return err
}

// previewPlan shows the plan on stderr before the confirmation question.
func previewPlan(ios *output.IOStreams, p *repair.Plan) error {
	s := *ios
	s.Out = ios.ErrOut
	pr := output.NewPrinter(&s, output.PrinterOptions{Format: output.FormatWide})
	if _, err := fmt.Fprintln(ios.ErrOut, "Plan:"); err != nil {
		return err
	}
	return pr.PrintList("PlanItem", p.Items, planItemSpec(false, ""))
}

func predictedSummary(p *repair.Plan) string {
	var allowed, refused, skipped int
	for _, it := range p.Items {
		switch {
		case it.Result == repair.ResultSkipped:
			skipped++
		case it.Allowed:
			allowed++
		default:
			refused++
		}
	}
	var parts []string
	if allowed > 0 {
		parts = append(parts, fmt.Sprintf("%d to apply", allowed))
	}
	if refused > 0 {
		parts = append(parts, fmt.Sprintf("%d refused", refused))
	}
	if skipped > 0 {
		parts = append(parts, fmt.Sprintf("%d with nothing to do", skipped))
	}
	return strings.Join(parts, ", ")
}

// planItemSpec is the table of a plan's items: present's columns and,
// with -o wide, the parameters. withResult adds the RESULT column (after
// an apply).
func planItemSpec(withResult bool, empty string) output.TableSpec {
	cols := append(present.PlanColumns(withResult),
		output.Col("PARAMS", func(it repair.Item) string { return paramsText(it.Params) }, output.WideOnly()))
	return output.TableSpec{Columns: cols, Empty: empty}
}

func paramsText(p repair.Params) string {
	var parts []string
	if p.MinIdleMs > 0 {
		parts = append(parts, "minIdle="+output.HumanDuration(msDuration(p.MinIdleMs)))
	}
	if p.MaxLen > 0 {
		parts = append(parts, fmt.Sprintf("maxLen=%d", p.MaxLen))
	}
	if p.Force {
		parts = append(parts, "force")
	}
	if p.DLQStream != "" {
		parts = append(parts, "dlq="+p.DLQStream)
	}
	if p.ReplayTo != "" {
		parts = append(parts, "to="+p.ReplayTo)
	}
	if p.Reason != "" {
		parts = append(parts, fmt.Sprintf("reason=%q", p.Reason))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
