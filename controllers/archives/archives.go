// Package archives keeps backup archives: as files of the operator's
// backup volume, or as objects of an S3-compatible bucket. An archive
// exists only once complete: a file is written beside its name and renamed
// once synced, an object is a (multipart) upload that completes at the end.
package archives

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/apiserver-operator/apiserver-operator/controllers/tenantio"
)

// Store keeps one archive.
type Store interface {
	// Location names it: file://<path>, s3://<endpoint>/<bucket>/<object>.
	Location() string
	// Create opens the archive for writing; it exists once committed.
	Create(ctx context.Context) (Destination, error)
	Open(ctx context.Context) (io.ReadCloser, error)
	// Remove removes the archive; one that does not exist is removed.
	Remove(ctx context.Context) error
}

// Destination is an archive being written.
type Destination interface {
	io.Writer
	// Commit makes it the archive, and returns its size.
	Commit() (int64, error)
	// Abort drops it unless committed.
	Abort()
}

// ErrGone: the archive is not where it was stored.
var ErrGone = errors.New("the archive is gone")

// Volume keeps the archive as the file path.
func Volume(path string) Store { return volume{path: path} }

type volume struct{ path string }

func (v volume) Location() string { return "file://" + v.path }

func (v volume) Create(context.Context) (Destination, error) {
	if err := os.MkdirAll(filepath.Dir(v.path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the backup directory %s: %w", filepath.Dir(v.path), err)
	}
	f, err := os.CreateTemp(filepath.Dir(v.path), filepath.Base(v.path)+".partial-*")
	if err != nil {
		return nil, fmt.Errorf("creating the archive: %w", err)
	}
	return &file{f: f, path: v.path}, nil
}

func (v volume) Open(context.Context) (io.ReadCloser, error) {
	f, err := os.Open(v.path)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%w from %s", ErrGone, v.Location())
	}
	if err != nil {
		return nil, fmt.Errorf("opening the archive %s: %w", v.path, err)
	}
	return f, nil
}

func (v volume) Remove(context.Context) error {
	if err := os.Remove(v.path); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("removing the archive %s: %w", v.path, err)
	}
	return nil
}

// file writes an archive to a temporary file, renamed into place once
// complete and synced.
type file struct {
	f         *os.File
	path      string
	n         int64
	committed bool
}

func (d *file) Write(p []byte) (int, error) {
	n, err := d.f.Write(p)
	d.n += int64(n)
	return n, err
}

func (d *file) Commit() (int64, error) {
	if err := d.f.Sync(); err != nil {
		return 0, fmt.Errorf("writing the archive: %w", err)
	}
	if err := d.f.Close(); err != nil {
		return 0, fmt.Errorf("writing the archive: %w", err)
	}
	if err := os.Rename(d.f.Name(), d.path); err != nil {
		return 0, fmt.Errorf("storing the archive: %w", err)
	}
	d.committed = true
	return d.n, nil
}

func (d *file) Abort() {
	if !d.committed {
		_ = d.f.Close()
		_ = os.Remove(d.f.Name())
	}
}

// S3Options say where an object is and how to reach it.
type S3Options struct {
	// Endpoint is host[:port], without a scheme.
	Endpoint, Bucket, Object, Region string
	AccessKeyID, SecretAccessKey     string
	// CA is the PEM of the service's CA; the system's CAs when empty.
	CA []byte
	// Insecure speaks plain HTTP.
	Insecure bool
	// StallTimeout is how long a request may move no byte before it is
	// given up (DefaultStallTimeout when zero).
	StallTimeout time.Duration
}

// PartSize is the part of an upload held in memory: an archive's size is
// known only at its end, and minio-go would otherwise size parts for the
// largest object S3 takes.
const PartSize = 16 << 20

// S3 keeps the archive as an object of a bucket.
func S3(o S3Options) (Store, error) {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if len(o.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(o.CA) {
			return nil, errors.New("the S3 service's CA holds no PEM certificate")
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	// A dead endpoint is known within seconds; a stalled one within the
	// stall timeout.
	transport.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: tenantio.RefuseMetadata}).DialContext
	transport.TLSHandshakeTimeout = 10 * time.Second
	stall := o.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	cli, err := minio.New(o.Endpoint, &minio.Options{
		Creds:     credentials.NewStaticV4(o.AccessKeyID, o.SecretAccessKey, ""),
		Secure:    !o.Insecure,
		Region:    o.Region,
		Transport: stallGuard{next: transport, after: stall, host: o.Endpoint},
		// A few tries, not minio's ten: a stalled endpoint costs at most
		// this many stall timeouts.
		MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("reaching S3 at %s: %w", o.Endpoint, err)
	}
	return &bucket{client: cli, o: o}, nil
}

type bucket struct {
	client *minio.Client
	o      S3Options
}

func (s *bucket) Location() string {
	return "s3://" + s.o.Endpoint + "/" + s.o.Bucket + "/" + s.o.Object
}

func (s *bucket) Create(ctx context.Context) (Destination, error) {
	pr, pw := io.Pipe()
	d := &upload{pw: pw, done: make(chan error, 1)}
	go func() {
		_, err := s.client.PutObject(ctx, s.o.Bucket, s.o.Object, pr, -1, minio.PutObjectOptions{
			PartSize: PartSize, ContentType: "application/octet-stream",
		})
		if err != nil {
			err = s3Error("uploading the archive to", s.Location(), err)
		}
		_ = pr.CloseWithError(err) // never fails
		d.done <- err
	}()
	return d, nil
}

func (s *bucket) Open(ctx context.Context) (io.ReadCloser, error) {
	if _, err := s.client.StatObject(ctx, s.o.Bucket, s.o.Object, minio.StatObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("%w from %s", ErrGone, s.Location())
		}
		return nil, s3Error("reading the archive", s.Location(), err)
	}
	obj, err := s.client.GetObject(ctx, s.o.Bucket, s.o.Object, minio.GetObjectOptions{})
	if err != nil {
		return nil, s3Error("reading the archive", s.Location(), err)
	}
	return coarseReader{ReadCloser: obj, location: s.Location()}, nil
}

func (s *bucket) Remove(ctx context.Context) error {
	err := s.client.RemoveObject(ctx, s.o.Bucket, s.o.Object, minio.RemoveObjectOptions{})
	if code := minio.ToErrorResponse(err).Code; err != nil && code != "NoSuchKey" && code != "NoSuchBucket" {
		return s3Error("removing the archive", s.Location(), err)
	}
	return nil
}

// upload streams an archive into an object: it exists once the upload
// completes, never in part.
type upload struct {
	pw        *io.PipeWriter
	done      chan error
	n         int64
	committed bool
}

func (d *upload) Write(p []byte) (int, error) {
	n, err := d.pw.Write(p)
	d.n += int64(n)
	return n, err
}

func (d *upload) Commit() (int64, error) {
	_ = d.pw.Close() // never fails
	if err := <-d.done; err != nil {
		return 0, err
	}
	d.committed = true
	return d.n, nil
}

var errAborted = errors.New("the backup stopped before its end")

func (d *upload) Abort() {
	if !d.committed {
		_ = d.pw.CloseWithError(errAborted) // never fails
		<-d.done                            //nolint:errcheck // the upload's own error: it was aborted
		d.committed = true
	}
}
