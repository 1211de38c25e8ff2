package core

import (
	"fmt"
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
	if where, text, found := nonDecimalInt(&root, ""); found {
		return nil, fmt.Errorf("%w: %s: %s: write whole numbers in plain decimal (YAML reads 010 as octal 8, 0x10 as 16 and 1_0 as 10)", ErrBadWorkflow, where, text)
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
// ffctl's own flags refuse those forms (exit 2). It returns where (the
// field's path, "tasks[0].retry.max_attempts", and its line) and the text
// as written; ok is false when every number is plain.
func nonDecimalInt(n *yaml.Node, path string) (where, text string, ok bool) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if w, t, ok := nonDecimalInt(c, path); ok {
				return w, t, true
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			if path != "" {
				key = path + "." + key
			}
			if w, t, ok := nonDecimalInt(n.Content[i+1], key); ok {
				return w, t, true
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if w, t, ok := nonDecimalInt(c, path+"["+strconv.Itoa(i)+"]"); ok {
				return w, t, true
			}
		}
	case yaml.ScalarNode:
		if n.ShortTag() == "!!int" && n.Style == 0 && !plainDecimal.MatchString(n.Value) {
			return fmt.Sprintf("line %d: %s", n.Line, path), n.Value, true
		}
	}
	return "", "", false
}
