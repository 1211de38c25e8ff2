package cli

// This file holds the reading of an input file (a workflow file, a params
// file, a runs file), "-" being standard input.

import (
	"bytes"
	"errors"
	"github.com/flowforge/flowforge/core"
	"io"
	"os"
)

// maxWorkflowFileBytes bounds a file readInput reads (a workflow file, a
// params file): core.MaxWorkflowFileBytes.
const maxWorkflowFileBytes = core.MaxWorkflowFileBytes

// openInput opens path for reading, "-" meaning standard input; close
// releases it. The error is os.Open's reason (unwrapped from its
// *PathError), for the caller's usage error.
func openInput(env *Env, path string) (r io.Reader, close func(), err error) {
	if path == "-" {
		return env.Stdin, func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, errors.Unwrap(err)
	}
	return f, func() { f.Close() }, nil
}

// readInput reads the file at path (openInput) whole, without a UTF-8
// byte-order mark. Errors (usage): it cannot be read, or it is larger than
// maxWorkflowFileBytes.
func readInput(env *Env, path string) ([]byte, error) {
	r, closeInput, err := openInput(env, path)
	if err != nil {
		return nil, usageError("cannot read %s: %v", path, err)
	}
	defer closeInput()
	data, err := io.ReadAll(io.LimitReader(r, maxWorkflowFileBytes+1))
	if err != nil {
		return nil, usageError("cannot read %s: %v", path, err)
	}
	if len(data) > maxWorkflowFileBytes {
		return nil, usageError("%s is larger than %d bytes", path, maxWorkflowFileBytes)
	}
	return bytes.TrimPrefix(data, []byte(utf8BOM)), nil
}

// utf8BOM is the byte-order mark some editors write at the start of a
// UTF-8 file; it is not part of the file's text.
const utf8BOM = "\uFEFF"
