package main

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/portcullis/portcullis/internal/console"
)

// The console and `mcp --http` require a credential on every address: a
// loopback listener is reachable by every program on the machine. Without
// --token-file each makes one at start, in a file only its user may read,
// and says where (as notebook servers do).

// newTokenFile makes a random token (32 bytes, base64url) in a new
// directory only the user may enter (mode 0700, under $XDG_RUNTIME_DIR,
// else the temporary directory), in a file only the user may read (0600,
// created exclusively). remove deletes both when the command ends.
func newTokenFile(kind string) (path, token string, remove func(), err error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "portcullis-"+kind+"-")
	if err != nil {
		return "", "", nil, fmt.Errorf("a login token: %w", err)
	}
	remove = func() { _ = os.RemoveAll(dir) }
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		remove()
		return "", "", nil, err
	}
	token = base64.RawURLEncoding.EncodeToString(b)
	path = filepath.Join(dir, "token")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err == nil {
		_, err = f.WriteString(token + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		remove()
		return "", "", nil, fmt.Errorf("a login token: %w", err)
	}
	return path, token, remove, nil
}

// readToken reads a login token: the file's content without surrounding
// white space, at least console.MinTokenLen characters, in a file nobody
// but its owner may read (where the system has such modes).
func readToken(path string) (string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s may be read by others (mode %v): chmod 600 it", path, info.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < console.MinTokenLen || strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("%s: the token must be one line of at least %d characters (e.g. head -c 32 /dev/urandom | base64 > %s)", path, console.MinTokenLen, path)
	}
	return tok, nil
}
