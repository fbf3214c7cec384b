package backup

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
	"time"
)

func archive(t *testing.T, keys int) ([]byte, []KeyValue) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, Manifest{Namespace: "ns", Name: "t", Prefix: "/tenants/ns/t", CreatedAt: time.Unix(1, 0).UTC(),
		Sets: []Set{{Servers: []string{"https://main:2379"}}, {Servers: []string{"https://events:2379"}, Resources: []string{"events"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Secret(Secret{Role: "ca", Data: map[string][]byte{"tls.key": []byte("\x00key")}}); err != nil {
		t.Fatal(err)
	}
	var kvs []KeyValue
	for i := range keys {
		kv := KeyValue{Set: i % 2, Key: fmt.Sprintf("/configmaps/default/cm-%d", i), Value: bytes.Repeat([]byte{byte(i)}, i%300)}
		if i%2 == 1 {
			kv.TTL = int64(i)
		}
		if err := w.KeyValue(kv); err != nil {
			t.Fatal(err)
		}
		kvs = append(kvs, kv)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), kvs
}

func readAll(b []byte) ([]KeyValue, []Secret, error) {
	r, err := NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, nil, err
	}
	var kvs []KeyValue
	var secrets []Secret
	for {
		s, kv, err := r.Next()
		switch {
		case errors.Is(err, io.EOF):
			return kvs, secrets, nil
		case err != nil:
			return nil, nil, err
		case s != nil:
			secrets = append(secrets, *s)
		default:
			kvs = append(kvs, *kv)
		}
	}
}

func TestArchive_ReadsBackWhatWasWritten(t *testing.T) {
	b, want := archive(t, 1000)
	got, secrets, err := readAll(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if len(got[i].Value) == 0 {
			got[i].Value = nil
		}
		if len(want[i].Value) == 0 {
			want[i].Value = nil
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("read %d keys back, not the %d written", len(got), len(want))
	}
	if len(secrets) != 1 || string(secrets[0].Data["tls.key"]) != "\x00key" {
		t.Fatalf("read back the Secrets %v", secrets)
	}
}

// uncompressed is b's content, and recompress makes an archive of it.
func uncompressed(t *testing.T, b []byte) []byte {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func recompress(raw []byte) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	_, _ = gz.Write(raw)
	_ = gz.Close()
	return buf.Bytes()
}

func TestArchive_RefusesWhatIsNotWhole(t *testing.T) {
	b, _ := archive(t, 200)
	raw := uncompressed(t, b)
	cases := map[string][]byte{
		"empty":                {},
		"not gzip":             []byte("hello"),
		"another format":       recompress([]byte("some other file\n")),
		"only the manifest":    recompress(raw[:200]),
		"cut before the end":   recompress(raw[:len(raw)-1]),
		"cut inside a record":  recompress(raw[:len(raw)/2]),
		"data after it":        recompress(append(append([]byte{}, raw...), 'x')),
		"a record too large":   recompress(append(append([]byte{}, raw[:len(magic)]...), 'M', 0xff, 0xff, 0xff, 0xff, 0x0f)),
		"compressed and cut":   b[:len(b)-10],
		"one byte of a value":  recompress(flip(raw, len(raw)/2)),
		"one byte of the hash": recompress(flip(raw, len(raw)-5)),
	}
	for what, archive := range cases {
		if _, _, err := readAll(archive); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: read with %v, want ErrCorrupt", what, err)
		}
	}
}

func flip(b []byte, i int) []byte {
	out := append([]byte{}, b...)
	out[i] ^= 0x01
	return out
}

func TestArchive_WriterRefusesKeysItCouldNotReadBack(t *testing.T) {
	w, err := NewWriter(io.Discard, Manifest{Sets: []Set{{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []KeyValue{
		{Set: 1, Key: "/a"},
		{Set: 0, Key: "a"},
		{Set: 0, Key: "/a", Value: make([]byte, maxValue+1)},
	} {
		if err := w.KeyValue(kv); err == nil {
			t.Errorf("archived set %d key %.20q with %d bytes", kv.Set, kv.Key, len(kv.Value))
		}
	}
}

func TestSeal_OnlyTheIdentityUnsealsAndAlteredArchivesAreRefused(t *testing.T) {
	b, want := archive(t, 300)
	id, _, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	var sealed bytes.Buffer
	w, err := Seal(&sealed, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(sealed.Bytes(), []byte("\x00key")) || bytes.Contains(sealed.Bytes(), []byte("cm-1")) {
		t.Fatal("the sealed archive holds plain text")
	}
	r, err := Unseal(bytes.NewReader(sealed.Bytes()), id)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := readAll(plain)
	if err != nil || len(got) != len(want) {
		t.Fatalf("read %d keys back (%v)", len(got), err)
	}
	other, _, _ := NewIdentity()
	if _, err := Unseal(bytes.NewReader(sealed.Bytes()), other); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("another identity unsealed it: %v", err)
	}
	altered := flip(sealed.Bytes(), sealed.Len()-100)
	if r, err := Unseal(bytes.NewReader(altered), id); err == nil {
		if _, err := io.ReadAll(r); err == nil {
			t.Fatal("an altered archive unsealed")
		}
	}
}
