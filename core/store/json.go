package store

import (
	"database/sql/driver"
	"encoding/json"
	"fmt"
)

// JSON holds a json/jsonb column's value. SQL NULL scans as empty, and empty
// marshals as JSON null, so it can sit in both query rows and CLI output.
type JSON []byte

// Scan implements sql.Scanner.
func (j *JSON) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*j = nil
	case []byte:
		*j = append(JSON(nil), v...)
	case string:
		*j = JSON(v)
	default:
		return fmt.Errorf("scan JSON: unsupported type %T", src)
	}
	return nil
}

// Value implements driver.Valuer.
func (j JSON) Value() (driver.Value, error) {
	if len(j) == 0 {
		return nil, nil
	}
	return string(j), nil
}

// MarshalJSON writes the stored document, or null.
func (j JSON) MarshalJSON() ([]byte, error) {
	if len(j) == 0 {
		return []byte("null"), nil
	}
	return j, nil
}

// UnmarshalJSON keeps the raw document.
func (j *JSON) UnmarshalJSON(b []byte) error {
	*j = append(JSON(nil), b...)
	return nil
}

// scanJSONObject decodes a jsonb column's value src (text or bytes, as the
// driver gives it) into v, for the Scan of a type read as one jsonb object;
// what names the column in errors.
func scanJSONObject(src any, what string, v any) error {
	var b []byte
	switch t := src.(type) {
	case []byte:
		b = t
	case string:
		b = []byte(t)
	default:
		return fmt.Errorf("scan %s: unsupported type %T", what, src)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("scan %s: %w", what, err)
	}
	return nil
}

// StringList holds a text[] column read as to_jsonb(column): SQL NULL scans
// as nil (and marshals as JSON null), a JSON array of strings as its
// elements.
type StringList []string

// Scan implements sql.Scanner.
func (l *StringList) Scan(src any) error {
	var raw []byte
	switch v := src.(type) {
	case nil:
		*l = nil
		return nil
	case []byte:
		raw = v
	case string:
		raw = []byte(v)
	default:
		return fmt.Errorf("scan string list: unsupported type %T", src)
	}
	var out []string
	if err := json.Unmarshal(raw, &out); err != nil {
		return fmt.Errorf("scan string list: %w", err)
	}
	*l = out
	return nil
}
