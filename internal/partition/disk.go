//go:build linux

package partition

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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

// NewDisk mounts a tmpfs of size bytes on a new directory, after
// unmounting what runs that died (SIGKILL) left mounted.
func NewDisk(t testing.TB, size int64) *Disk {
	t.Helper()
	RequireMount(t)
	removeStaleMounts(t)
	d := &Disk{Dir: filepath.Join(t.TempDir(), "disk"), size: size}
	if err := os.Mkdir(d.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The source names the process (pcx-<pid>), as a namespace does: a
	// later run tells a mount left by a dead one.
	src := fmt.Sprintf("%s%d", prefix, os.Getpid())
	if err := unix.Mount(src, d.Dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("partition: mount -t tmpfs -o size=%d %s: %v", size, d.Dir, err)
	}
	// Registered after t.TempDir: runs before the directory is removed
	// (detached at once, even with a file still open on it).
	t.Cleanup(func() {
		if err := unix.Unmount(d.Dir, unix.MNT_DETACH); err != nil {
			t.Errorf("partition: umount %s: %v", d.Dir, err)
		}
	})
	return d
}

// Resize changes the disk's size (mount -o remount,size=…): larger makes
// room, never losing what is on it.
func (d *Disk) Resize(t testing.TB, size int64) {
	t.Helper()
	if err := unix.Mount("", d.Dir, "", unix.MS_REMOUNT, fmt.Sprintf("size=%d", size)); err != nil {
		t.Fatalf("partition: mount -o remount,size=%d %s: %v", size, d.Dir, err)
	}
	d.size = size
}

// Mounts lists the mount points of the tmpfs this package mounted that
// are mounted now (of any run), with the pid that mounted each.
func Mounts(t testing.TB) map[string]int {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[2] != "tmpfs" || !strings.HasPrefix(f[0], prefix) {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimPrefix(f[0], prefix)); err == nil {
			out[unescapeMount(f[1])] = pid
		}
	}
	return out
}

// unescapeMount undoes /proc/mounts' octal escapes (a space is \040).
func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// removeStaleMounts unmounts the disks of runs whose process is gone.
func removeStaleMounts(t testing.TB) {
	t.Helper()
	for dir, pid := range Mounts(t) {
		if pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Logf("partition: unmounting %s left by a dead run: %v", dir, err)
			continue
		}
		_ = os.RemoveAll(filepath.Dir(dir)) // the dead run's temporary directory
		t.Logf("partition: unmounted %s, left by a dead run", dir)
	}
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
