package core

import (
	"fmt"
	"math"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"
)

// plainDecimal is a whole number as a workflow file may write it: an
// optional sign, then 0 or digits without a leading zero.
var plainDecimal = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// decodePlainNumbers decodes dec's next YAML document, refusing a whole
// number not written in plain decimal (nonDecimalInt). Errors wrap
// ErrBadWorkflow.
func decodePlainNumbers(dec *yaml.Decoder) (any, error) {
	var root yaml.Node
	if err := dec.Decode(&root); err != nil {
		return nil, fmt.Errorf("%w: not YAML or JSON: %v", ErrBadWorkflow, err)
	}
	if where, text, found := nonDecimalInt(&root, "", false); found {
		return nil, fmt.Errorf("%w: %s: %s: write whole numbers in plain decimal (YAML reads 010 as octal 8, 0x10 as 16, 1_0 as 10 and 1e3 as 1000; quote text that looks like a number)", ErrBadWorkflow, where, text)
	}
	var doc any
	if err := root.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: not YAML or JSON: %v", ErrBadWorkflow, err)
	}
	return doc, nil
}

// nonDecimalInt finds in a workflow file's YAML the first whole number not
// written in plain decimal: YAML reads 010 as octal (8), 0x10 as 16, 0o10
// and 0b10 in their bases and 1_0 as 10, so a file saying
// `max_attempts: 010` stored 8 without a word (a trial found it), where
// ffctl's own flags refuse those forms (exit 2). Outside params (the one
// place a file holds data of its own: no field of a definition is a
// fraction), a number YAML reads as a float with a whole value (1e3, 3.0)
// is refused likewise: it was stored as the whole number (max_attempts:
// 1e3 as 1000). It returns where (the field's path,
// "tasks[0].retry.max_attempts", and its line) and the text as written;
// ok is false when every number is plain.
func nonDecimalInt(n *yaml.Node, path string, inParams bool) (where, text string, ok bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if w, t, ok := nonDecimalInt(c, path, inParams); ok {
				return w, t, true
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			name, key := n.Content[i].Value, n.Content[i].Value
			if path != "" {
				key = path + "." + key
			}
			if w, t, ok := nonDecimalInt(n.Content[i+1], key, inParams || name == "params"); ok {
				return w, t, true
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if w, t, ok := nonDecimalInt(c, path+"["+strconv.Itoa(i)+"]", inParams); ok {
				return w, t, true
			}
		}
	case yaml.ScalarNode:
		if n.Style != 0 {
			return "", "", false // quoted: text
		}
		if n.ShortTag() == "!!int" && !plainDecimal.MatchString(n.Value) || n.ShortTag() == "!!float" && !inParams && !plainDecimal.MatchString(n.Value) && wholeFloat(n.Value) {
			return fmt.Sprintf("line %d: %s", n.Line, path), n.Value, true
		}
	}
	return "", "", false
}

// wholeFloat says whether a YAML float's text has a whole value (1e3,
// 3.0, 1E1): one a whole-number field would take as that number. (Digits
// alone too large for an int64 are a float to YAML; the caller leaves
// them to the field's range check.)
func wholeFloat(text string) bool {
	f, err := strconv.ParseFloat(text, 64)
	return err == nil && f == math.Trunc(f) && !math.IsInf(f, 0)
}
