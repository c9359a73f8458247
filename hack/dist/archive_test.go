package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The same files give the same archive bytes whatever their owner, mode
// and time on disk: the archive is reproducible.
func TestArchiveIsReproducible(t *testing.T) {
	modTime := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	write := func(dir string, fileTime time.Time, perm os.FileMode) []byte {
		t.Helper()
		bin, lic := filepath.Join(dir, "bin"), filepath.Join(dir, "lic")
		for p, data := range map[string]string{bin: "\x7fELF binary", lic: "Apache License"} {
			if err := os.WriteFile(p, []byte(data), perm); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, fileTime, fileTime); err != nil {
				t.Fatal(err)
			}
		}
		var buf bytes.Buffer
		if err := writeArchive(&buf, modTime, []archiveFile{{name: "kgc", path: bin, mode: 0o755}, {name: "LICENSE", path: lic, mode: 0o644}}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	a := write(t.TempDir(), time.Now(), 0o600)
	b := write(t.TempDir(), time.Now().Add(-48*time.Hour), 0o755)
	if !bytes.Equal(a, b) {
		t.Error("two archives of the same files differ")
	}

	gz, err := gzip.NewReader(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() {
		t.Errorf("gzip header names %q, dated %s", gz.Name, gz.ModTime)
	}
	tr := tar.NewReader(gz)
	want := []struct {
		name, data string
		mode       int64
	}{{"kgc", "\x7fELF binary", 0o755}, {"LICENSE", "Apache License", 0o644}}
	for _, w := range want {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("want %s: %v", w.name, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != w.name || h.Mode != w.mode || string(data) != w.data || !h.ModTime.Equal(modTime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Typeflag != tar.TypeReg {
			t.Errorf("entry %+v with %q, want %s mode %o dated %s owned by 0:0 with %q", h, data, w.name, w.mode, modTime, w.data)
		}
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("more than %d entries: %v", len(want), err)
	}
}
