//go:build linux

package partition

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Disk is a small filesystem of the test's own: a tmpfs mounted on a
// directory of the test, which a test fills until writes fail with ENOSPC
// ("no space left on device") and then grows or frees again. It is
// unmounted when the test ends.
type Disk struct {
	// Dir is where it is mounted.
	Dir  string
	size int64
}

// RequireMount skips the test where a tmpfs cannot be mounted (not
// root); under CI (CI=true) it fails it.
func RequireMount(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv(EnvCI) == "true" {
		t.Fatal("partition: a tmpfs is needed under CI=true and cannot be mounted: not root")
	}
	t.Skip("partition: cannot mount a tmpfs here (not root): run as root")
}

// NewDisk mounts a tmpfs of size bytes on a new directory.
func NewDisk(t testing.TB, size int64) *Disk {
	t.Helper()
	RequireMount(t)
	d := &Disk{Dir: filepath.Join(t.TempDir(), "disk"), size: size}
	if err := os.Mkdir(d.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mount(t, "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "tmpfs", d.Dir)
	// Registered after t.TempDir: runs before the directory is removed.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", d.Dir).CombinedOutput(); err != nil {
			t.Errorf("partition: umount %s: %v: %s", d.Dir, err, out)
		}
	})
	return d
}

// Resize changes the disk's size (mount -o remount,size=…): larger makes
// room, never losing what is on it.
func (d *Disk) Resize(t testing.TB, size int64) {
	t.Helper()
	mount(t, "-o", fmt.Sprintf("remount,size=%d", size), d.Dir)
	d.size = size
}

// Free returns the bytes free on the disk.
func (d *Disk) Free(t testing.TB) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// Fill writes a filler file of name under Dir until the disk is full
// (the write fails with ENOSPC), leaving keep bytes free, and returns how
// much it wrote. Remove the file to give the space back.
func (d *Disk) Fill(t testing.TB, name string, keep int64) int64 {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(d.Dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var wrote int64
	for {
		free := d.Free(t) - keep
		if free <= 0 {
			return wrote
		}
		n, err := f.Write(chunk[:min(int64(len(chunk)), free)])
		wrote += int64(n)
		if errors.Is(err, unix.ENOSPC) {
			return wrote
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func mount(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
		t.Fatalf("partition: mount %s: %v: %s", strings.Join(args, " "), err, out)
	}
}
