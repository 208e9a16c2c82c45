package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/protctl/protctl/internal/clierr"
	"github.com/protctl/protctl/internal/output"
)

func main() {
	ctx, stop := interruptContext()
	code := run(ctx, output.System(), os.Args[1:], nil)
	stop()
	os.Exit(code)
}

// run executes one invocation and returns its exit code. getenv nil is
// os.Getenv. Tests call it in-process with test streams.
func run(ctx context.Context, ios *output.IOStreams, args []string, getenv func(string) string) int {
	f := newFactory(ios)
	if getenv != nil {
		f.Getenv = getenv
	}
	return execute(ctx, f, newRootCmd(f), args)
}

// execute runs args on the command tree and turns the outcome into an
// exit code, reporting an error on stderr.
func execute(ctx context.Context, f *Factory, root *cobra.Command, args []string) int {
	ios := f.IOStreams
	if args == nil {
		args = []string{} // nil would make cobra read os.Args
	}
	root.SetArgs(args)
	f.args = args
	cmd, err := root.ExecuteContextC(ctx)
	f.completeWrongType(ctx, err)
	f.close()
	if errors.Is(err, context.Canceled) && errors.Is(context.Cause(ctx), clierr.ErrInterrupted) {
		err = clierr.Interrupted.Wrap(err)
	}
	code, kind := clierr.Classify(err) // the one place errors become exit codes
	if err != nil {
		printError(ios, cmd, f.errorFormat(args), kind, f.operatorError(err, kind))
	}
	return code
}

// interruptContext is cancelled, with cause clierr.ErrInterrupted, by the
// first SIGINT or SIGTERM, so commands can stop cleanly (a node drains);
// a second signal exits at once with 130.
func interruptContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel(clierr.ErrInterrupted)
		case <-done:
			return
		}
		select {
		case <-sigs:
			os.Exit(clierr.ExitInterrupted)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}
