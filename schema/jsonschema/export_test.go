package jsonschema

import (
	"bytes"

	sjs "github.com/santhosh-tekuri/jsonschema/v6"
)

// CompileRef compiles the schema at ref (a file name under Base with an
// optional fragment, "defs.json#/$defs/incident"), for tests of parts that
// are not messages.
func CompileRef(ref string) (func(doc any) error, error) {
	c := sjs.NewCompiler()
	c.DefaultDraft(sjs.Draft2020)
	c.AssertFormat()
	entries, err := FS.ReadDir(".")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		data, _ := FS.ReadFile(e.Name())
		doc, err := sjs.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		if err := c.AddResource(Base+e.Name(), doc); err != nil {
			return nil, err
		}
	}
	s, err := c.Compile(Base + ref)
	if err != nil {
		return nil, err
	}
	return s.Validate, nil
}
