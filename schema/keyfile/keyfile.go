// Package keyfile reads and writes the secret files of SPEC §2.8: nkey
// seeds (a role's login and signing key) and the internal HMAC key.
//
// Files are created exclusively with mode 0600 and appear whole or not at
// all: the content is written to a private temporary file in the same
// directory and hard-linked into place, which fails if the name exists.
// So two processes racing to create the same file end with one file, and
// a reader never sees half of one.
//
// Errors name the file and what is wrong with it, never its content.
//
// It imports nothing of Portcullis.
package keyfile

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nkeys"
)

var (
	// ErrNotSeed: the file holds neither a user nkey seed (SU…) nor a
	// .creds file with one.
	ErrNotSeed = errors.New("not a user nkey seed (SU…) or a .creds file with one")
	// ErrBadInternalKey: the file does not hold exactly 64 hex digits.
	ErrBadInternalKey = errors.New("not an internal key: want exactly 64 hex digits")
)

// InternalKeySize is the internal HMAC key's length in bytes.
const InternalKeySize = 32

// decorated reports whether data is a decorated .creds file ("-----BEGIN
// NATS USER JWT-----" and the like) rather than a bare seed.
func decorated(data []byte) bool { return bytes.Contains(data, []byte("-----BEGIN")) }

// LoadSeed reads a user nkey seed from a file holding the seed alone
// (surrounding whitespace is ignored) or from a decorated .creds file.
func LoadSeed(path string) (nkeys.KeyPair, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keyfile: %w", err)
	}
	defer wipe(data)
	seed := bytes.TrimSpace(data)
	if !decorated(data) && len(bytes.Fields(seed)) != 1 {
		return nil, fmt.Errorf("keyfile: %s: %w", path, ErrNotSeed)
	}
	// nkeys' errors are fixed strings: they carry no key material.
	kp, err := nkeys.ParseDecoratedUserNKey(seed)
	if err != nil {
		return nil, fmt.Errorf("keyfile: %s: %w: %w", path, ErrNotSeed, err)
	}
	return kp, nil
}

// IsCreds reports whether the file is a decorated .creds file that carries
// a JWT (decentralized auth) rather than a bare nkey seed.
func IsCreds(path string) (bool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return false, fmt.Errorf("keyfile: %w", err)
	}
	defer wipe(data)
	return bytes.Contains(data, []byte("-----BEGIN NATS USER JWT-----")), nil
}

// WriteSeed writes kp's seed to a new file (mode 0600), one line. It never
// overwrites: an existing file is an error matching fs.ErrExist.
func WriteSeed(path string, kp nkeys.KeyPair) error {
	seed, err := kp.Seed()
	if err != nil {
		return fmt.Errorf("keyfile: %w", err)
	}
	data := append(seed, '\n')
	defer wipe(data)
	return createExclusive(path, data)
}

// CreateInternal makes a new internal key file: 32 random bytes as 64
// lowercase hex digits and a newline, mode 0600. It never overwrites: an
// existing file is an error matching fs.ErrExist. It returns the key.
func CreateInternal(path string) ([]byte, error) {
	key := make([]byte, InternalKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("keyfile: %w", err)
	}
	data := []byte(hex.EncodeToString(key) + "\n")
	defer wipe(data)
	if err := createExclusive(path, data); err != nil {
		return nil, err
	}
	return key, nil
}

// LoadInternal reads an internal key file: exactly 64 hex digits,
// surrounding whitespace ignored. It returns the 32-byte key.
func LoadInternal(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keyfile: %w", err)
	}
	defer wipe(data)
	digits := bytes.TrimSpace(data)
	key := make([]byte, InternalKeySize)
	if len(digits) != 2*InternalKeySize {
		return nil, fmt.Errorf("keyfile: %s: %w", path, ErrBadInternalKey)
	}
	// hex's errors quote the offending byte: not passed on.
	if _, err := hex.Decode(key, digits); err != nil {
		return nil, fmt.Errorf("keyfile: %s: %w", path, ErrBadInternalKey)
	}
	return key, nil
}

// LoadOrCreateInternal returns the internal key of SPEC §2.8 "Defence in
// depth": read from path, or, if there is no such file, created there
// (see CreateInternal; a missing parent directory is made, mode 0700,
// since the default lives under store.dir). Processors racing to create it
// end with the same key.
func LoadOrCreateInternal(path string) ([]byte, error) {
	key, err := LoadInternal(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("keyfile: %w", err)
	}
	key, err = CreateInternal(path)
	if errors.Is(err, fs.ErrExist) {
		// Another process created it first: its key is the key.
		return LoadInternal(path)
	}
	return key, err
}

// createExclusive creates path with data, mode 0600, whole or not at all.
func createExclusive(path string, data []byte) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("keyfile: %s: %w", path, fs.ErrExist)
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("keyfile: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("keyfile: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("keyfile: writing %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("keyfile: writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("keyfile: writing %s: %w", path, err)
	}
	// A hard link is an exclusive create of a complete file.
	if err := os.Link(tmp.Name(), path); err != nil {
		var le *os.LinkError
		if errors.As(err, &le) {
			err = le.Err // the temporary name is of no use to the reader
		}
		return fmt.Errorf("keyfile: creating %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the new name durable; best effort
		d.Close()
	}
	return nil
}

func wipe(b []byte) {
	for i := range b {
		b[i] = 0
	}
}
