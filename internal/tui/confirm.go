package tui

import (
	"fmt"
	"slices"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/protctl/protctl/internal/present"
	"github.com/protctl/protctl/internal/repair"
)

// confirmState is where a confirm dialog is.
type confirmState int

const (
	confirmPlanning confirmState = iota // the plan is being built
	confirmShown                        // the plan is shown: y applies, n cancels
	confirmApplying                     // Apply runs
	confirmDone                         // per-item results are shown
	confirmFailed                       // planning or applying failed
)

// confirm is the dialog an action opens: the equivalent command line, the
// plan the CLI would build (each item with the state it saw and whether
// it is allowed), a confirming keystroke, then each item's result.
type confirm struct {
	seq     int
	req     ActionRequest
	cmdline string
	state   confirmState
	plan    *repair.Plan
	outcome repair.Outcome
	err     error
	// warning is shown with the results (an apply not audited).
	warning string
	// back is the mode to return to when the dialog closes.
	back mode
}

// pending counts the items Apply would try.
func (c *confirm) pending() int {
	if c.plan == nil {
		return 0
	}
	return present.Pending(c.plan)
}

func actionTitle(r ActionRequest) string {
	switch r.Action {
	case repair.ActionReap:
		return "Reap partition " + r.Category + "/" + r.Key
	case repair.ActionRelease:
		return "Release the lease of " + r.Group + " on " + r.Key
	case repair.ActionTrim:
		return fmt.Sprintf("Trim %s to %d entries", r.Stream, r.MaxLen)
	case repair.ActionDeadLetter:
		return "Dead-letter the head of " + r.Group + " on " + r.Key
	case repair.ActionDLQReplay:
		return "Replay the dead letters of " + r.Category + "/" + r.Key
	case repair.ActionDLQPurge:
		return "Purge the dead letters of " + r.Category + "/" + r.Key
	case repair.ActionSeek:
		return "Seek " + r.Group + " on " + r.Category + "/" + r.Key + " to " + r.SeekTo
	case repair.ActionTopicSeek:
		return "Seek " + r.Subscription + " on " + r.Topic + "/" + r.Partition + " (service " + r.Service + ") to " + r.SeekTo
	case repair.ActionRetry:
		return "Retry parked " + r.Subscription + "/" + r.Aggregate
	case repair.ActionSkip:
		return "Skip parked " + r.Subscription + "/" + r.Aggregate
	}
	return string(r.Action)
}

// clonePlan copies p deeply enough for Apply to record results in the
// copy while the dialog still renders the original.
func clonePlan(p *repair.Plan) *repair.Plan {
	c := *p
	c.Items = slices.Clone(p.Items)
	return &c
}

func (c *confirm) view(st *Styles, width, height int, readOnly bool) string {
	var lines []string
	add := func(s ...string) { lines = append(lines, s...) }
	add(st.DialogHead.Render(actionTitle(c.req)), "")
	add(st.Label.Render("Equivalent command:"), "  "+st.Command.Render(c.cmdline), "")
	switch c.state {
	case confirmPlanning:
		add(st.Status.Render("Planning (reads only)…"))
	case confirmFailed:
		add(st.Error.Render("error: " + oneLine(c.err.Error())))
		if c.warning != "" {
			add(st.Error.Render("warning: " + oneLine(c.warning)))
		}
		add("", st.Status.Render("esc closes"))
	default:
		if c.plan == nil {
			break
		}
		title := fmt.Sprintf("Plan (%d %s):", len(c.plan.Items), present.Plural(len(c.plan.Items), "item", "items"))
		if c.state == confirmDone {
			title = "Result: " + c.plan.Summary() + " (" + string(c.outcome) + ")"
		}
		add(st.Label.Render(title))
		add(indent(wrapLast(planTable(c.plan, c.state == confirmDone), width-2), "  ")...)
		add("")
		switch c.state {
		case confirmShown:
			switch n := c.pending(); {
			case readOnly:
				add(st.Error.Render("read-only: nothing can be applied"), st.Status.Render("enter or esc closes"))
			case n == 0:
				add(st.Status.Render("Nothing to apply (every item is refused or has nothing to do). enter or esc closes"))
			default:
				add(st.DialogHead.Render(fmt.Sprintf("Apply %d %s? ", n, present.Plural(n, "change", "changes"))) +
					st.HintKey.Render("y") + st.HintDesc.Render(" apply  ") + st.HintKey.Render("n/esc") + st.HintDesc.Render(" cancel"))
			}
		case confirmApplying:
			add(st.Status.Render("Applying (each item re-checked atomically)…"))
		case confirmDone:
			if c.warning != "" {
				add(st.Error.Render("warning: " + oneLine(c.warning)))
			}
			add(st.Status.Render("esc/enter closes and refreshes"))
		}
	}
	for i, l := range lines {
		lines[i] = ansi.Truncate(l, width, "…")
	}
	if len(lines) > height {
		lines = append(lines[:height-1], st.Status.Render("…"))
	}
	return strings.Join(lines, "\n")
}

// planTable lists the items in the CLI's plan table's columns (action,
// target, the state seen, allowed, after an apply the result, and the
// reason), a reason's line breaks turned into spaces: wrapLast wraps it.
func planTable(p *repair.Plan, results bool) []string {
	cols := present.PlanColumns(results)
	reason := &cols[len(cols)-1]
	value := reason.Value
	reason.Value = func(it any) string { return oneLine(value(it)) }
	items := make([]any, len(p.Items))
	for i, it := range p.Items {
		items[i] = it
	}
	return strings.Split(strings.TrimRight(columnsTable(cols, items), "\n"), "\n")
}

// wrapLast wraps the last column of a plain table (the plan's REASON)
// onto continuation lines aligned under its header, so that a long
// reason is read whole at any width instead of cut at the frame's edge.
// Lines that fit, and tables whose last column starts too far right to
// wrap in, are left alone.
func wrapLast(lines []string, width int) []string {
	if len(lines) == 0 {
		return lines
	}
	head := lines[0]
	last := strings.LastIndex(strings.TrimRight(head, " "), "  ")
	if last < 0 {
		return lines
	}
	col := ansi.StringWidth(head[:last]) + 2
	for col < ansi.StringWidth(head) && head[col] == ' ' {
		col++
	}
	room := width - col
	if room < 20 {
		return lines
	}
	out := make([]string, 0, len(lines))
	pad := strings.Repeat(" ", col)
	for _, l := range lines {
		if ansi.StringWidth(l) <= width {
			out = append(out, l)
			continue
		}
		prefix, text := ansi.Truncate(l, col, ""), ansi.TruncateLeft(l, col, "")
		for i, part := range strings.Split(ansi.Wrap(text, room, " "), "\n") {
			if i == 0 {
				out = append(out, prefix+part)
			} else {
				out = append(out, pad+strings.TrimLeft(part, " "))
			}
		}
	}
	return out
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }

func indent(lines []string, pre string) []string {
	for i, l := range lines {
		lines[i] = pre + l
	}
	return lines
}
