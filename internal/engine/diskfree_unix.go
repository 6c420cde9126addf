//go:build unix

package engine

import "golang.org/x/sys/unix"

// diskFree is the space free to an unprivileged writer on dir's
// filesystem.
func diskFree(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
