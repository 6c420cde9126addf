// Package keyfile reads and creates key files. (Stand-in until the
// keyfile branch merges.)
package keyfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nkeys"
)

// LoadOrCreateInternal reads the internal HMAC key file, creating it
// (exclusive, 0600) when missing.
func LoadOrCreateInternal(path string) ([]byte, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, werr := f.WriteString(hex.EncodeToString(b) + "\n")
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, fmt.Errorf("keyfile: write %s: %w", path, werr)
		}
		return b, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("keyfile: create %s: %w", path, err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keyfile: read %s: %w", path, err)
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	if err != nil || len(k) != 32 {
		return nil, fmt.Errorf("keyfile: %s does not hold 64 hex digits", path)
	}
	return k, nil
}

// LoadSeed reads a user nkey seed file.
func LoadSeed(path string) (nkeys.KeyPair, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("keyfile: read %s: %w", path, err)
	}
	kp, err := nkeys.ParseDecoratedNKey(raw)
	if err != nil {
		return nil, fmt.Errorf("keyfile: %s holds no nkey seed", path)
	}
	return kp, nil
}
