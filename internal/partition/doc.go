// Package partition is the harness of the tests that make the faults a
// network and a disk make (issue 33): real nats-servers and processors,
// each in a Linux network namespace of its own on a bridge the test
// makes (Net, Servers), links cut and healed, groups split apart, a
// Toxiproxy in front of one processor for latency, bandwidth limits,
// stalls and resets (Proxy), and small filesystems that fill (Disk).
//
// It needs root and iproute2 (`ip`): Require and RequireMount skip the
// test, saying why, where they are missing, and fail it under CI=true so
// that the tests cannot silently vanish there. It touches nothing of the
// host's network: every address, link and bridge is inside namespaces
// the test made (named pcx-<pid>-<n>-<node>), deleted when the test ends;
// those of a run that was killed are deleted by the next one.
//
// The network parts are Linux only. A test binary that uses Proxy calls
// RunChild first in its TestMain: the proxy is that binary re-executed
// inside a node.
package partition
