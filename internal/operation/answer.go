package operation

import (
	"fmt"
	"net/http"
	"time"

	"github.com/oncepay/oncepay/internal/idempotency"
	"github.com/oncepay/oncepay/internal/platform/problem"
	"github.com/oncepay/oncepay/internal/platform/respond"
)

// The answers an operation stores under its client's key: what a retry
// with the key replays. location is the object's URL path.

// Accepted is the 202 a key replays while its operation runs: the object
// as it stands, and when to look again.
func Accepted(v any, location string, retryAfter time.Duration) (idempotency.Response, error) {
	body, err := respond.Marshal(v)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("encode %s: %w", location, err)
	}
	return idempotency.Response{
		StatusCode: http.StatusAccepted,
		Header: map[string]string{
			"Content-Type": "application/json",
			"Location":     location,
			"Retry-After":  problem.RetryAfterValue(retryAfter),
		},
		Body: body,
	}, nil
}

// Created is the final answer of an operation that succeeded: 201 with
// the object.
func Created(v any, location string) (idempotency.Response, error) {
	return final(http.StatusCreated, v, location)
}

// Done is the final answer of an operation that succeeded on an object
// that already existed (a capture, a cancel): 200 with the object.
func Done(v any, location string) (idempotency.Response, error) {
	return final(http.StatusOK, v, location)
}

func final(status int, v any, location string) (idempotency.Response, error) {
	body, err := respond.Marshal(v)
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("encode %s: %w", location, err)
	}
	return idempotency.Response{
		StatusCode: status,
		Header:     map[string]string{"Content-Type": "application/json", "Location": location},
		Body:       body,
	}, nil
}

// Refused is the final answer of an operation that failed: the problem,
// with the object's location when it has one.
func Refused(pe *problem.Error, location string) idempotency.Response {
	header := map[string]string{"Content-Type": problem.ContentType}
	if location != "" {
		header["Location"] = location
	}
	return idempotency.Response{StatusCode: pe.Type.Status, Header: header, Body: pe.Marshal()}
}
