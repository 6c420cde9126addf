package admin_test

import (
	stdjson "encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/portcullis/portcullis/internal/admin"
	"github.com/portcullis/portcullis/kv"
	"github.com/portcullis/portcullis/schema"
)

var update = flag.Bool("update", false, "rewrite testdata/identity_encodings.golden")

// TestIdentityEncodings: every struct that carries an intent's identity
// (provider, capability, operation, environment, referent) encodes byte
// for byte as it did when each held its own copy of those fields, zero
// and filled, under both encoders the module uses. The golden file was
// written from the flat structs; rewrite it (-update) only for a wire
// change that is meant.
func TestIdentityEncodings(t *testing.T) {
	values := []any{
		kv.Identity{}, kv.Intent{}, schema.DispatchRequest{}, schema.Activity{},
		admin.Intent{}, admin.ActivityEntry{}, admin.Pending{},
	}
	var b strings.Builder
	for _, v := range values {
		typ := reflect.TypeOf(v)
		filled := reflect.New(typ).Elem()
		fill(filled, 0)
		for _, c := range []struct {
			name string
			v    any
		}{{"zero", v}, {"filled", filled.Interface()}} {
			v2, err := schema.Marshal(c.v)
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			v1, err := stdjson.Marshal(c.v)
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			fmt.Fprintf(&b, "%s %s json/v2\n%s\n%s %s encoding/json\n%s\n", typ, c.name, v2, typ, c.name, v1)
		}
	}
	path := filepath.Join("testdata", "identity_encodings.golden")
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Errorf("encodings changed:\n%s\nwant:\n%s", got, want)
	}
}

// fill sets every field of v to a value derived from its name or depth,
// so that each member of the encoding is present and tells which field
// wrote it.
func fill(v reflect.Value, depth int) {
	if depth > 3 {
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			if f.Type.Kind() == reflect.String {
				v.Field(i).SetString(strings.ToLower(f.Name))
				continue
			}
			fill(v.Field(i), depth+1)
		}
	case reflect.String:
		v.SetString("s")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(7 + depth))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(9 + depth))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[jsontext.Value]() {
			v.SetBytes([]byte(`{"k":1}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth+1)
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}
