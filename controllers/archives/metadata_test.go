package archives

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// An S3 endpoint a backup names at the metadata address is never dialed:
// the refusal is in the error's detail, for the operator's log.
func TestS3_NeverDialsTheMetadataAddress(t *testing.T) {
	_, err := open(t, "169.254.169.254:80", time.Second)
	var se *StoreError
	if !errors.As(err, &se) || se.Detail == nil || !strings.Contains(se.Detail.Error(), "the operator does not connect to 169.254.169.254") {
		t.Fatalf("opening an archive at the metadata address: %v, want the refusal in its detail", err)
	}
}
