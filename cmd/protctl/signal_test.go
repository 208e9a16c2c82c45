//go:build unix

package main

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/protctl/protctl/internal/clierr"
)

// TestFirstSignalCancelsWithInterrupted sends SIGINT to the test process:
// interruptContext has taken the signal over, so the process lives on and
// the context ends with ErrInterrupted as its cause (exit 130). Only one
// signal is sent: a second one exits the process, as it should for a user.
func TestFirstSignalCancelsWithInterrupted(t *testing.T) {
	ctx, stop := interruptContext()
	defer stop()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not cancel the context")
	}
	if !errors.Is(context.Cause(ctx), clierr.ErrInterrupted) {
		t.Fatalf("cause %v", context.Cause(ctx))
	}
}
