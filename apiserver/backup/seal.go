package backup

import (
	"fmt"
	"io"
	"strings"

	"filippo.io/age"
)

// IdentityKey is the key of the Secret that holds the identity which
// unseals a backup's archive.
const IdentityKey = "identity"

// NewIdentity makes the X25519 identity that seals one backup: its secret
// form (AGE-SECRET-KEY-1…, kept in a Secret) and its recipient.
func NewIdentity() (identity, recipient string, err error) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return "", "", fmt.Errorf("making the identity that seals the backup: %w", err)
	}
	return id.String(), id.Recipient().String(), nil
}

// Seal encrypts what is written to the returned writer for the identity
// identity (age's format: the age tool reads it too); Close it to end
// the archive.
func Seal(w io.Writer, identity string) (io.WriteCloser, error) {
	id, err := age.ParseX25519Identity(strings.TrimSpace(identity))
	if err != nil {
		return nil, fmt.Errorf("reading the identity that seals the backup: %w", err)
	}
	return age.Encrypt(w, id.Recipient())
}

// Unseal reads what Seal wrote for identity.
func Unseal(r io.Reader, identity string) (io.Reader, error) {
	id, err := age.ParseX25519Identity(strings.TrimSpace(identity))
	if err != nil {
		return nil, fmt.Errorf("reading the identity that unseals the backup: %w", err)
	}
	out, err := age.Decrypt(r, id)
	if err != nil {
		return nil, fmt.Errorf("%w: it does not unseal with the backup's identity: %w", ErrCorrupt, err)
	}
	return out, nil
}
