package output

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/protctl/protctl/internal/clierr"
)

func TestConfirm(t *testing.T) {
	cases := []struct {
		name      string
		tty       bool
		input     string
		opts      ConfirmOptions
		wantErr   string // "" = go ahead
		wantAsked bool
	}{
		{name: "no TTY without --yes refuses", tty: false, wantErr: "refusing to change anything without --yes when stdin is not a terminal"},
		{name: "no TTY with --yes goes ahead", tty: false, opts: ConfirmOptions{Yes: true}},
		{name: "read-only refuses even with --yes", tty: true, opts: ConfirmOptions{Yes: true, ReadOnly: true}, wantErr: "read-only"},
		{name: "TTY y", tty: true, input: "y\n", wantAsked: true},
		{name: "TTY YES", tty: true, input: "YES\n", wantAsked: true},
		{name: "TTY empty answer declines", tty: true, input: "\n", wantErr: "declined", wantAsked: true},
		{name: "TTY n declines", tty: true, input: "n\n", wantErr: "declined", wantAsked: true},
		{name: "TTY EOF declines", tty: true, input: "", wantErr: "declined", wantAsked: true},
		{name: "protected needs the name", tty: true, input: "y\n", opts: ConfirmOptions{Protected: true, Context: "prod"}, wantErr: "declined", wantAsked: true},
		{name: "protected with the name", tty: true, input: "prod\n", opts: ConfirmOptions{Protected: true, Context: "prod"}, wantAsked: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ios, in, _, errOut := Test()
			ios.SetTTY(c.tty)
			in.WriteString(c.input)
			err := ios.Confirm(context.Background(), "Reap 3 partitions?", c.opts)
			if c.wantErr == "" && err != nil {
				t.Fatalf("want go ahead, got %v", err)
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("want error containing %q, got %v", c.wantErr, err)
				}
				if code, kind := clierr.Classify(err); code != 6 || kind != clierr.Refused {
					t.Fatalf("refusal must exit 6 REFUSED, got %d %s", code, kind)
				}
			}
			if asked := strings.Contains(errOut.String(), "Reap 3 partitions?"); asked != c.wantAsked {
				t.Fatalf("asked = %v, want %v (stderr %q)", asked, c.wantAsked, errOut)
			}
		})
	}
}

func TestConfirmReadsOnlyItsLine(t *testing.T) {
	ios, in, _, _ := Test()
	ios.SetTTY(true)
	in.WriteString("y\nn\n")
	if err := ios.Confirm(context.Background(), "first?", ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ios.Confirm(context.Background(), "second?", ConfirmOptions{}); err == nil {
		t.Fatal("the second answer was n")
	}
}

type blockingReader struct{ ch chan struct{} }

func (b blockingReader) Read([]byte) (int, error) { <-b.ch; return 0, errors.New("closed") }

func TestConfirmStopsWhenContextEnds(t *testing.T) {
	ios, _, _, _ := Test()
	ios.SetTTY(true)
	r := blockingReader{make(chan struct{})}
	defer close(r.ch)
	ios.In = r
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(clierr.ErrInterrupted)
	err := ios.Confirm(ctx, "go?", ConfirmOptions{})
	if !errors.Is(err, clierr.ErrInterrupted) {
		t.Fatalf("want the interruption, got %v", err)
	}
}

func TestCheckWritable(t *testing.T) {
	if err := CheckWritable(ConfirmOptions{}); err != nil {
		t.Fatal(err)
	}
	err := CheckWritable(ConfirmOptions{ReadOnly: true})
	if code, _ := clierr.Classify(err); code != clierr.ExitRefused {
		t.Fatalf("read-only must exit 6, got %d (%v)", code, err)
	}
}
