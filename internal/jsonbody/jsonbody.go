// Package jsonbody reads a JSON object request body into its members without
// deciding what they mean, so that an endpoint's validation can report every
// bad field at once (unknown, duplicated, wrong type or out of range) rather
// than stopping at the first, as encoding/json's DisallowUnknownFields does.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/problem"
)

// MaxBytes is the largest body accepted.
const MaxBytes = 16 << 10

// Object is a JSON object's members, in the order they appeared.
type Object struct {
	Names   []string
	Members map[string]json.RawMessage
}

// Read reads r's body as one JSON object of at most MaxBytes. Errors are
// *problem.Error values: 415 for a non-JSON content type, 413 for a body
// that is too large, 400 for anything that is not a single JSON object.
func Read(w http.ResponseWriter, r *http.Request) (Object, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mediaType, _, err := mime.ParseMediaType(ct)
		if err != nil || (mediaType != "application/json" && mediaType != "application/merge-patch+json") {
			return Object{}, problem.New(problem.UnsupportedMediaType, "Content-Type is %q; send application/json.", ct)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBytes))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return Object{}, problem.New(problem.RequestTooLarge, "The body exceeds %d bytes.", MaxBytes)
	}
	if err != nil {
		return Object{}, problem.New(problem.InvalidRequest, "The body could not be read: %v.", err)
	}
	obj, err := Parse(body)
	if err != nil {
		return Object{}, &problem.Error{Type: problem.InvalidRequest, Detail: "The body is not a valid JSON object.",
			Fields: []problem.FieldError{{Field: "body", Detail: err.Error()}}}
	}
	return obj, nil
}

// Parse splits data, which must be exactly one JSON object, into its
// members. A name that appears twice is an error: parsers disagree about
// which one wins, and the fingerprint must mean the same to everyone.
func Parse(data []byte) (Object, error) {
	if !json.Valid(data) {
		return Object{}, describeSyntaxError(data)
	}
	// encoding/json would silently replace invalid UTF-8 with U+FFFD, so
	// two different byte strings could validate to the same request.
	if !utf8.Valid(data) {
		return Object{}, errors.New("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return Object{}, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return Object{}, errors.New("expected a JSON object")
	}
	obj := Object{Members: map[string]json.RawMessage{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return Object{}, err
		}
		name, ok := tok.(string)
		if !ok {
			return Object{}, errors.New("expected a member name")
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return Object{}, err
		}
		if _, dup := obj.Members[name]; dup {
			return Object{}, fmt.Errorf("member %q appears more than once", name)
		}
		obj.Names = append(obj.Names, name)
		obj.Members[name] = value
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return Object{}, err
	}
	// json.Valid accepted exactly one value, so nothing follows the object.
	return obj, nil
}

func describeSyntaxError(data []byte) error {
	var v any
	err := json.Unmarshal(data, &v)
	var syntaxErr *json.SyntaxError
	if errors.As(err, &syntaxErr) {
		return fmt.Errorf("invalid JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	}
	if err != nil {
		return err
	}
	return errors.New("invalid JSON")
}
