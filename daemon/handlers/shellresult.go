package handlers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/flowforge/flowforge/core"
)

// A shell command returns a structured result by writing JSON to the file
// $FLOWFORGE_RESULT_FILE names (in the attempt's private directory; it
// does not exist until the command writes it). When it wrote one, the
// task's result is that JSON: an object gets exit_code, stdout and stderr
// beside its own fields (its own fields of those names win), any other
// JSON value (a list, a string, a number) is the result as written. A
// file that holds no JSON, or more than core.MaxResultBytes, fails the
// task permanently: the same command writes it the same way again.

// resultFileName is the result file's name in the attempt's directory.
const resultFileName = "result.json"

// shellResult is the result of a command that exited 0 with res: res
// itself, or the JSON the command wrote to path merged with it.
func shellResult(path string, res ShellResult) (json.RawMessage, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return json.Marshal(res)
	}
	if err != nil {
		return nil, fmt.Errorf("shell: read $FLOWFORGE_RESULT_FILE: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, core.MaxResultBytes+1))
	if err != nil {
		return nil, fmt.Errorf("shell: read $FLOWFORGE_RESULT_FILE: %w", err)
	}
	if len(b) > core.MaxResultBytes {
		return nil, core.Permanent(fmt.Errorf("shell: $FLOWFORGE_RESULT_FILE holds more than %d bytes", core.MaxResultBytes))
	}
	if !json.Valid(b) {
		return nil, core.Permanent(fmt.Errorf("shell: $FLOWFORGE_RESULT_FILE holds no JSON value: %q", truncate(b, 200)))
	}
	var obj map[string]json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) && json.Unmarshal(b, &obj) == nil {
		beside, _ := json.Marshal(res)
		var own map[string]json.RawMessage
		_ = json.Unmarshal(beside, &own)
		for k, v := range own {
			if _, taken := obj[k]; !taken {
				obj[k] = v
			}
		}
		return json.Marshal(obj)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err != nil {
		return nil, core.Permanent(fmt.Errorf("shell: $FLOWFORGE_RESULT_FILE: %w", err))
	}
	return compact.Bytes(), nil
}

// truncate returns at most n bytes of b.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// itemEnv is FLOWFORGE_ITEM's value for an element (JSON): a string
// element as the string itself, any other as its JSON; ok is false when
// the task run is no element.
func itemEnv(item json.RawMessage) (string, bool) {
	if len(bytes.TrimSpace(item)) == 0 {
		return "", false
	}
	var s string
	if json.Unmarshal(item, &s) == nil {
		return s, true
	}
	return string(item), true
}
