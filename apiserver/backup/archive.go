// Package backup is the archive of one tenant's backup: every key under
// its etcd prefix, on each etcd it stores in, read at one revision of
// each, with the Secrets that read and trust them (encryption keys, CAs,
// service-account key). The archive is a stream, written and read in one
// pass (no size is known before the end): a magic line, then records,
// gzip-compressed; the last record sums up the others (counts and a
// SHA-256 of every byte before it), so that a truncated or altered archive
// is refused, not restored in part. Sealing it (the Secrets are key
// material) is the caller's: see Seal.
package backup

import (
	"bufio"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"time"
)

// Format names this version of the archive.
const Format = "controlplane.apiserver-operator.dev/backup/v1"

// magic begins every archive, before compression.
const magic = "apiserver-operator backup v1\n"

// Bounds on what a reader accepts: an archive is read from storage that
// another party may write to.
const (
	maxKey  = 64 << 10
	maxJSON = 4 << 20
	// maxValue is the operator's etcd client's receive limit.
	maxValue = 8 << 20
)

// Manifest says what the archive holds.
type Manifest struct {
	Format string `json:"format"`
	// Namespace, Name and UID are the backed-up ApiServerConfig's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Prefix is the tenant's etcd prefix; each key is stored relative to
	// it.
	Prefix string `json:"prefix"`
	// Sets are the etcds the tenant stores in, main first.
	Sets []Set `json:"sets"`
	// Version is the kube-apiserver version that wrote the data.
	Version   string    `json:"version,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// Set is one etcd of the tenant.
type Set struct {
	Servers []string `json:"servers"`
	// Resources are the group/resources this etcd stores by an override
	// ("events", "apps/deployments"); empty for the main servers.
	Resources []string `json:"resources,omitempty"`
}

// Secret is the data of one of the tenant's Secrets, by its role: the
// suffix of its name ("ca", "encryption").
type Secret struct {
	Role string `json:"role"`
	Type string `json:"type,omitempty"`
	// Annotations are those the operator reads back (where a rotation
	// stands).
	Annotations map[string]string `json:"annotations,omitempty"`
	Data        map[string][]byte `json:"data"`
}

// KeyValue is one stored key.
type KeyValue struct {
	// Set indexes Manifest.Sets.
	Set int
	// Key is relative to the prefix, and begins with "/".
	Key string
	// TTL is what was left of the key's lease, in seconds; 0 without one
	// (events expire: restored, they expire again).
	TTL   int64
	Value []byte
}

// Summary ends the archive.
type Summary struct {
	// Keys and Bytes count the key-values of each set.
	Keys  []int64 `json:"keys"`
	Bytes []int64 `json:"bytes"`
	// Secrets counts the Secrets.
	Secrets int `json:"secrets"`
	// Revisions are the etcd revision each set was read at.
	Revisions []int64 `json:"revisions"`
	// SHA256 is the hash of the archive before this record, uncompressed.
	SHA256 string `json:"sha256"`
}

// Record types.
const (
	recordManifest byte = 'M'
	recordSecret   byte = 'S'
	recordKey      byte = 'K'
	recordSummary  byte = 'E'
)

// Writer writes an archive.
type Writer struct {
	gz      *gzip.Writer
	out     *bufio.Writer
	sum     hash.Hash
	sets    int
	summary Summary
	err     error
}

// NewWriter begins an archive of m on w.
func NewWriter(w io.Writer, m Manifest) (*Writer, error) {
	m.Format = Format
	gz := gzip.NewWriter(w)
	a := &Writer{gz: gz, out: bufio.NewWriterSize(gz, 256<<10), sum: sha256.New(), sets: len(m.Sets)}
	a.summary.Keys, a.summary.Bytes = make([]int64, len(m.Sets)), make([]int64, len(m.Sets))
	a.summary.Revisions = make([]int64, len(m.Sets))
	a.write([]byte(magic))
	a.record(recordManifest, mustJSON(m))
	return a, a.err
}

// Secret adds a Secret.
func (a *Writer) Secret(s Secret) error {
	a.record(recordSecret, mustJSON(s))
	a.summary.Secrets++
	return a.err
}

// KeyValue adds a key.
func (a *Writer) KeyValue(kv KeyValue) error {
	if kv.Set < 0 || kv.Set >= a.sets {
		return fmt.Errorf("archiving key %s: set %d is not one of the manifest's %d", kv.Key, kv.Set, a.sets)
	}
	if !strings.HasPrefix(kv.Key, "/") || len(kv.Key) > maxKey || len(kv.Value) > maxValue {
		return fmt.Errorf("archiving key %.200q: a key begins with / and has at most %d bytes, a value at most %d", kv.Key, maxKey, maxValue)
	}
	b := binary.AppendUvarint(nil, uint64(kv.Set))
	// A lease longer than maxValue seconds (97 days) is kept that long.
	b = binary.AppendUvarint(b, uint64(min(max(kv.TTL, 0), maxValue)))
	b = binary.AppendUvarint(b, uint64(len(kv.Key)))
	b = append(b, kv.Key...)
	b = append(b, kv.Value...)
	a.record(recordKey, b)
	a.summary.Keys[kv.Set]++
	a.summary.Bytes[kv.Set] += int64(len(kv.Key) + len(kv.Value))
	return a.err
}

// Revision records the etcd revision set was read at.
func (a *Writer) Revision(set int, rev int64) {
	if set >= 0 && set < a.sets {
		a.summary.Revisions[set] = rev
	}
}

// Close ends the archive with its summary, and returns it.
func (a *Writer) Close() (Summary, error) {
	s := a.summary
	s.SHA256 = hex.EncodeToString(a.sum.Sum(nil))
	a.record(recordSummary, mustJSON(s))
	if a.err == nil {
		a.err = a.out.Flush()
	}
	if err := a.gz.Close(); a.err == nil {
		a.err = err
	}
	return s, a.err
}

func (a *Writer) record(kind byte, payload []byte) {
	head := binary.AppendUvarint([]byte{kind}, uint64(len(payload)))
	a.write(head)
	a.write(payload)
}

func (a *Writer) write(b []byte) {
	if a.err != nil {
		return
	}
	a.sum.Write(b)
	_, a.err = a.out.Write(b)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("backup: %T does not marshal: %v", v, err)) // plain structs: never
	}
	return b
}

// Reader reads an archive.
type Reader struct {
	in       *bufio.Reader
	sum      hash.Hash
	manifest Manifest
	counts   Summary
	done     bool
}

// ErrCorrupt: the archive is not one this operator wrote whole.
var ErrCorrupt = errors.New("the backup archive is truncated or altered")

// NewReader reads the archive's beginning from r: its manifest.
func NewReader(r io.Reader) (*Reader, error) {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	a := &Reader{in: bufio.NewReaderSize(gz, 256<<10), sum: sha256.New()}
	head := make([]byte, len(magic))
	if _, err := io.ReadFull(a.in, head); err != nil || string(head) != magic {
		return nil, fmt.Errorf("%w: it does not begin as an apiserver-operator backup", ErrCorrupt)
	}
	a.sum.Write(head)
	kind, payload, err := a.record()
	if err != nil {
		return nil, err
	}
	if kind != recordManifest || json.Unmarshal(payload, &a.manifest) != nil || a.manifest.Format != Format || len(a.manifest.Sets) == 0 {
		return nil, fmt.Errorf("%w: no manifest of %s", ErrCorrupt, Format)
	}
	a.counts.Keys, a.counts.Bytes = make([]int64, len(a.manifest.Sets)), make([]int64, len(a.manifest.Sets))
	return a, nil
}

// Manifest is what the archive says it holds.
func (a *Reader) Manifest() Manifest { return a.manifest }

// Next returns the next Secret or KeyValue (one of them nil), and io.EOF
// once the summary proved the archive whole.
func (a *Reader) Next() (*Secret, *KeyValue, error) {
	if a.done {
		return nil, nil, io.EOF
	}
	before := hex.EncodeToString(a.sum.Sum(nil))
	kind, payload, err := a.record()
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case recordSecret:
		s := &Secret{}
		if err := json.Unmarshal(payload, s); err != nil || s.Role == "" {
			return nil, nil, fmt.Errorf("%w: a Secret record does not parse", ErrCorrupt)
		}
		a.counts.Secrets++
		return s, nil, nil
	case recordKey:
		kv, err := parseKeyValue(payload, len(a.manifest.Sets))
		if err != nil {
			return nil, nil, err
		}
		a.counts.Keys[kv.Set]++
		a.counts.Bytes[kv.Set] += int64(len(kv.Key) + len(kv.Value))
		return nil, kv, nil
	case recordSummary:
		var s Summary
		if err := json.Unmarshal(payload, &s); err != nil {
			return nil, nil, fmt.Errorf("%w: the summary does not parse", ErrCorrupt)
		}
		a.counts.SHA256, a.counts.Revisions = before, s.Revisions
		if mustEqual(s, a.counts) != nil {
			return nil, nil, fmt.Errorf("%w: the summary says %d keys, %d Secrets and hash %.12s, the archive holds %d, %d and %.12s",
				ErrCorrupt, total(s.Keys), s.Secrets, s.SHA256, total(a.counts.Keys), a.counts.Secrets, before)
		}
		if _, err := a.in.ReadByte(); err != io.EOF {
			return nil, nil, fmt.Errorf("%w: data follows the summary", ErrCorrupt)
		}
		a.done = true
		return nil, nil, io.EOF
	}
	return nil, nil, fmt.Errorf("%w: unknown record %q", ErrCorrupt, kind)
}

// Summary is what the archive held, once Next returned io.EOF.
func (a *Reader) Summary() Summary { return a.counts }

func (a *Reader) record() (byte, []byte, error) {
	kind, err := a.in.ReadByte()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: it ends before its summary", ErrCorrupt)
	}
	n, err := binary.ReadUvarint(a.in)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: it ends inside a record", ErrCorrupt)
	}
	limit := uint64(maxJSON)
	if kind == recordKey {
		limit = maxKey + maxValue + 3*binary.MaxVarintLen64
	}
	if n > limit {
		return 0, nil, fmt.Errorf("%w: a record of %d bytes, more than %d", ErrCorrupt, n, limit)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(a.in, payload); err != nil {
		return 0, nil, fmt.Errorf("%w: it ends inside a record", ErrCorrupt)
	}
	a.sum.Write([]byte{kind})
	a.sum.Write(binary.AppendUvarint(nil, n))
	a.sum.Write(payload)
	return kind, payload, nil
}

func parseKeyValue(b []byte, sets int) (*KeyValue, error) {
	bad := fmt.Errorf("%w: a key record does not parse", ErrCorrupt)
	var fields [3]int
	for i := range fields {
		v, n := binary.Uvarint(b)
		if n <= 0 || v > maxValue+maxKey {
			return nil, bad
		}
		fields[i], b = int(v), b[n:] // bounded above: no overflow
	}
	set, ttl, keyLen := fields[0], fields[1], fields[2]
	if set >= sets || keyLen > maxKey || keyLen > len(b) {
		return nil, bad
	}
	kv := &KeyValue{Set: set, TTL: int64(ttl), Key: string(b[:keyLen]), Value: b[keyLen:]}
	if !strings.HasPrefix(kv.Key, "/") || len(kv.Value) > maxValue {
		return nil, bad
	}
	return kv, nil
}

func mustEqual(a, b Summary) error {
	if a.SHA256 != b.SHA256 || a.Secrets != b.Secrets || len(a.Keys) != len(b.Keys) || len(a.Bytes) != len(b.Bytes) {
		return ErrCorrupt
	}
	for i := range a.Keys {
		if a.Keys[i] != b.Keys[i] || a.Bytes[i] != b.Bytes[i] {
			return ErrCorrupt
		}
	}
	return nil
}

func total(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}
