package search

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Extraction says what text a message body yields. msg_content.content is
// an opaque payload (VARBINARY: encrypted, or carrying @-mentions and quote
// metadata, docs/design.md §1), so the default is deliberately narrow: text
// messages (msg_type 1) whose body is UTF-8 text. An operator whose
// payload is JSON names the field holding the text. A message that yields
// no text (another type, bytes that are not UTF-8, no such field, nothing
// but punctuation) is not indexed and is counted as skipped.
type Extraction struct {
	// Types are the msg_type values whose bodies are read; empty: [1].
	Types []uint8 `yaml:"types"`
	// JSONField, when set, reads the body as a JSON object and takes the
	// string at this dotted path ("text", or "body.text").
	JSONField string `yaml:"json_field"`
}

// Text is the searchable text of a body of type msgType; ok=false: none.
func (x Extraction) Text(msgType uint8, body []byte) (string, bool) {
	if !x.Indexed(msgType) {
		return "", false
	}
	var text string
	if x.JSONField == "" {
		if !utf8.Valid(body) {
			return "", false
		}
		text = string(body)
	} else {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			return "", false
		}
		for _, k := range strings.Split(x.JSONField, ".") {
			m, ok := v.(map[string]any)
			if !ok {
				return "", false
			}
			v = m[k]
		}
		s, ok := v.(string)
		if !ok {
			return "", false
		}
		text = s
	}
	if len(segments(text)) == 0 {
		return "", false
	}
	return text, true
}

// Indexed reports whether messages of msgType are read at all: a type
// changed to one that is not (a recall) removes the message.
func (x Extraction) Indexed(msgType uint8) bool {
	if len(x.Types) == 0 {
		return msgType == 1
	}
	return slices.Contains(x.Types, msgType)
}

// Check validates the configuration.
func (x Extraction) Check() error {
	if x.JSONField != "" && slices.Contains(strings.Split(x.JSONField, "."), "") {
		return fmt.Errorf("search: extraction json_field %q has an empty part", x.JSONField)
	}
	return nil
}
