package audit

import (
	"context"
	"errors"

	"github.com/protctl/protctl/internal/clierr"
)

// exitCode is the CLI's exit code for an apply that stopped on err: the
// contract's classification, with a cancelled context read as an
// interruption (an operator's ctrl-c is how an apply gets cancelled).
func exitCode(err error) int {
	if errors.Is(err, context.Canceled) {
		return clierr.ExitInterrupted
	}
	code, _ := clierr.Classify(err)
	return code
}
