package handlers

import (
	"bytes"
	"io"
	"os"
	goruntime "runtime"
	"testing"
)

// Input that fits a pipe is complete, EOF included, before the command
// starts: reading it needs nothing from the node (no copying goroutine),
// so a node paused after starting a command cannot delay the call.
func TestCommandInputIsCompleteBeforeStart(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Skip("Windows streams every input")
	}
	for _, n := range []int{0, 1, 100, prefilledInput} {
		data := bytes.Repeat([]byte("e"), n)
		in, closeInput, err := commandInput(data)
		if err != nil {
			t.Fatal(err)
		}
		f, ok := in.(*os.File)
		if !ok {
			t.Fatalf("%d bytes: stdin is a %T, want a prefilled pipe", n, in)
		}
		got, err := io.ReadAll(f)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read %d (%v)", n, len(got), err)
		}
		closeInput()
	}
	in, closeInput, err := commandInput(make([]byte, prefilledInput+1))
	if err != nil {
		t.Fatal(err)
	}
	defer closeInput()
	if _, ok := in.(*bytes.Reader); !ok {
		t.Fatalf("%d bytes: stdin is a %T, want it streamed", prefilledInput+1, in)
	}
}
