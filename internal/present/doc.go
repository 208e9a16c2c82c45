// Package present holds the words an operator reads for inspect and
// repair values, written once for the two front ends: the CLI
// (cmd/protctl) and the dashboard (internal/tui). It decides what a cell,
// a field or a hint says (a plan item's SEEN, a group's lease and head, a
// partition's detail, the repair hints of a stuck group, "-" for unknown
// or none); each front end only lays that text out its own way (the CLI's
// printer, the dashboard's frames). The dashboard cannot import the CLI's
// package main, so without this package it copied the CLI's text, and
// the copies drifted (a reap plan's leases were missing from the
// dashboard's SEEN column).
//
// Nothing here does I/O beyond writing to the io.Writer it is given, and
// nothing here decides anything a plan or a verdict depends on: those
// live in internal/inspect and internal/repair.
package present
