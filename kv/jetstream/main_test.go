package jetstream_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/portcullis/portcullis/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// servers starts what a test of replicas replicas runs on and returns its
// URL: one server for 1, a three-server cluster for 3 (skipped with
// -short).
func servers(t *testing.T, replicas int) string {
	t.Helper()
	if replicas == 1 {
		return testenv.StartServer(t, "").ClientURL()
	}
	if testing.Short() {
		t.Skip("a three-server cluster")
	}
	return testenv.NewCluster(t).URL()
}
