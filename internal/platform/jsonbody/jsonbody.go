// Package jsonbody reads a JSON object request body into its members without
// deciding what they mean, so that an endpoint's validation can report every
// bad field at once (unknown, duplicated, wrong type or out of range) rather
// than stopping at the first, as encoding/json's DisallowUnknownFields does.
package jsonbody

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/oncepay/oncepay/internal/platform/problem"
)

// MaxBytes is the largest body accepted.
const MaxBytes = 16 << 10

// Object is a JSON object's members, in the order they appeared.
type Object struct {
	Names   []string
	Members map[string]json.RawMessage
}

// ReadOptional is Read for a body that may be left out: an empty body is
// the empty object, whether it says so (Content-Length: 0) or is found
// empty (a chunked body of no chunks).
func ReadOptional(w http.ResponseWriter, r *http.Request) (Object, error) {
	empty := Object{Members: map[string]json.RawMessage{}}
	if r.ContentLength == 0 {
		return empty, nil
	}
	if r.ContentLength < 0 {
		body := bufio.NewReaderSize(r.Body, 16)
		if _, err := body.Peek(1); errors.Is(err, io.EOF) {
			return empty, nil
		}
		withBody := *r
		withBody.Body = struct {
			io.Reader
			io.Closer
		}{body, r.Body}
		r = &withBody
	}
	return Read(w, r)
}

// Read reads r's body as one JSON object of at most MaxBytes. Errors are
// *problem.Error values: 415 for a compressed body or a non-JSON content
// type, 413 for a body that is too large, 400 for anything that is not a
// single JSON object.
func Read(w http.ResponseWriter, r *http.Request) (Object, error) {
	if coding := contentCoding(r.Header); coding != "" {
		// RFC 9110 §15.5.16: say which codings are accepted.
		w.Header().Set("Accept-Encoding", "identity")
		return Object{}, problem.New(problem.UnsupportedContentEncoding, "Content-Encoding is %q; send the body uncompressed.", coding)
	}
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

// contentCoding returns the first content coding other than identity that
// h's Content-Encoding lists, or "". Bodies are read as they are: a gzip
// body would otherwise be rejected as invalid JSON, or worse, a body that
// happens to parse would mean something other than what the client sent.
func contentCoding(h http.Header) string {
	for _, v := range h.Values("Content-Encoding") {
		for coding := range strings.SplitSeq(v, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				return coding
			}
		}
	}
	return ""
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
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return Object{}, err
		}
		name, ok := tok.(string)
		if !ok {
			return Object{}, errors.New("expected a member name")
		}
		// Only the name's string holds a backslash between the two offsets.
		if esc := loneSurrogate(data[start:dec.InputOffset()]); esc != "" {
			return Object{}, fmt.Errorf("a member name contains %s, %s", esc, loneSurrogateAdvice)
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

// loneSurrogateAdvice completes the description of an unpaired surrogate.
const loneSurrogateAdvice = "an unpaired UTF-16 surrogate escape; send the character itself or a complete surrogate pair"

// loneSurrogate returns the first \uXXXX escape in raw, which must be valid
// JSON, that is half of a UTF-16 surrogate pair without the other half; ""
// if there is none. encoding/json decodes such an escape as U+FFFD, so
// without this check "\ud800", "\udfff" and "\ufffd" would be one and the
// same request (and fingerprint) while meaning three different things to
// other parsers.
func loneSurrogate(raw []byte) string {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++ // the escaped character: \\ and \" are skipped whole
		if raw[i] != 'u' {
			continue
		}
		// Valid JSON: \u is followed by four hex digits.
		esc, r := raw[i-1:i+5], hex4(raw[i+1:i+5])
		i += 4
		switch {
		case r >= 0xd800 && r < 0xdc00: // a high surrogate needs a low one next
			if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
				if low := hex4(raw[i+3 : i+7]); low >= 0xdc00 && low <= 0xdfff {
					i += 6
					continue
				}
			}
			return string(esc)
		case r >= 0xdc00 && r <= 0xdfff: // a low surrogate on its own
			return string(esc)
		}
	}
	return ""
}

// hex4 decodes four hex digits; anything else is -1.
func hex4(b []byte) int {
	n, err := strconv.ParseUint(string(b), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
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
