// Package audit keeps the trail of every change an operator made: one
// entry per applied repair in a capped Redis stream (Key, "protctl:audit"),
// written by a Recorder that hooks into repair.Repairer.Apply and read
// back by List for `protctl audit ls`.
//
// Why a Redis stream: the audit log lives where the state it describes
// lives, so every protctl that can change a deployment (any laptop, any
// CI job, the dashboard) writes to the same place without another
// service; XADD is atomic and ids are the server's clock, so the order is
// the order Redis saw. MAXLEN ~ keeps it bounded (DefaultMaxLen); ship it
// elsewhere for longer retention. On a cluster it is one key, in one slot.
//
// Each stream entry has a few flat fields for redis-cli (time, user, host,
// context, outcome, actions) and the whole Entry as JSON in the "entry"
// field, which is what List decodes.
//
// What is recorded: an Apply that tried at least one item, whatever the
// items' results (applied, conflict, refused by the store), and also an
// Apply that stopped on an error half way. Dry runs, declined
// confirmations, read-only refusals and plans whose items were all refused
// or skipped by the plan itself try nothing and are not recorded (see
// docs/decisions/0021-audit-log.md). The command line is recorded with secrets
// redacted (RedactArgs).
package audit
