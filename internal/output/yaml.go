package output

import (
	"bytes"
	"fmt"

	"gopkg.in/yaml.v3"
)

// jsonToYAML re-renders a JSON document as block-style YAML, keeping the
// key order of the JSON (commands tag their types for encoding/json only,
// so YAML and JSON can never disagree on field names).
func jsonToYAML(raw []byte) ([]byte, error) {
	var doc yaml.Node
	// YAML 1.2 is a superset of JSON, so the decoder reads it as is.
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("output: converting to yaml: %w", err)
	}
	blockStyle(&doc)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("output: converting to yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("output: converting to yaml: %w", err)
	}
	return b.Bytes(), nil
}

// blockStyle drops the flow and quoting styles the JSON syntax gave every
// node; the encoder quotes again whatever needs it (e.g. the string "123").
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}
