package archives

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/minio/minio-go/v7"
)

// StoreError is a failure of an S3 service as status may show it: what was
// being done, where, and the kind of failure. The network's detail
// (refused, unreachable, a TLS alert, a DNS answer) stays in Detail, for
// the operator's log: in status, where a spec's owner reads it, it would
// map what the operator's network position reaches.
type StoreError struct {
	What, Location, Kind string
	Detail               error
}

func (e *StoreError) Error() string { return fmt.Sprintf("%s %s: %s", e.What, e.Location, e.Kind) }

// Unwrap is the detail, for errors.Is and errors.As.
func (e *StoreError) Unwrap() error { return e.Detail }

// s3Error is err, a failure of what at location, as a StoreError.
func s3Error(what, location string, err error) error {
	if err == nil {
		return nil
	}
	var stall *stallError
	kind := "the S3 service could not be reached or did not answer as S3 does (the operator's log has the cause)"
	switch resp := minio.ToErrorResponse(err); {
	case resp.Code != "":
		kind = "the S3 service answered " + resp.Code
	case errors.As(err, &stall):
		kind = stall.Error()
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		kind = "it was stopped"
	}
	return &StoreError{What: what, Location: location, Kind: kind, Detail: err}
}

// coarseReader reports its read errors as StoreErrors.
type coarseReader struct {
	io.ReadCloser
	location string
}

func (r coarseReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = s3Error("reading the archive", r.location, err)
	}
	return n, err
}
