package chaos

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A passing run removes its temporary ringlimit-chaos-* directory; a
// failing one keeps it and says where it is. (Checked failing: with
// Close removing nothing, the first case leaves the directory behind.)
func TestRunnerWorkDir(t *testing.T) {
	for _, keep := range []bool{false, true} {
		r, err := NewRunner(context.Background(), Options{Binary: "/nonexistent/ringlimit"})
		if err != nil {
			t.Fatalf("NewRunner: %v", err)
		}
		dir := r.WorkDir()
		if !filepath.IsAbs(dir) || !strings.HasPrefix(filepath.Base(dir), "ringlimit-chaos-") {
			t.Fatalf("work dir %q, want a ringlimit-chaos-* temp dir", dir)
		}
		if err := os.WriteFile(filepath.Join(dir, "history.csv"), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		kept := r.Close(keep)
		_, statErr := os.Stat(dir)
		switch {
		case !keep && (kept != "" || !os.IsNotExist(statErr)):
			t.Errorf("passing run: Close returned %q, stat %v; want the dir removed", kept, statErr)
		case keep && (kept != dir || statErr != nil):
			t.Errorf("failing run: Close returned %q, stat %v; want %q kept", kept, statErr, dir)
		}
		os.RemoveAll(dir)
	}
}

// A work dir the caller gave is never removed.
func TestRunnerGivenWorkDirKept(t *testing.T) {
	dir := t.TempDir()
	r, err := NewRunner(context.Background(), Options{Binary: "/nonexistent/ringlimit", WorkDir: dir})
	if err != nil {
		t.Fatalf("NewRunner: %v", err)
	}
	if kept := r.Close(false); kept != dir {
		t.Errorf("Close = %q, want %q", kept, dir)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("given work dir: %v", err)
	}
}
