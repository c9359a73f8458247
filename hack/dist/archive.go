package main

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"time"
)

// archiveFile is one file of an archive: its name there, where it is
// read from, and its permission bits.
type archiveFile struct {
	name string
	path string
	mode int64
}

// writeArchive writes a gzip-compressed tar of files, flat, in the given
// order. Nothing of the machine that builds it goes in: every file is
// owned by 0:0 without names and dated modTime, and the gzip header has
// neither a name nor a time, so the same files yield the same bytes.
func writeArchive(w io.Writer, modTime time.Time, files []archiveFile) error {
	gz, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := addFile(tw, f, modTime); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func addFile(tw *tar.Writer, f archiveFile, modTime time.Time) error {
	src, err := os.Open(f.path)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", f.path)
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     f.name,
		Mode:     f.mode,
		Size:     fi.Size(),
		ModTime:  modTime,
		Format:   tar.FormatUSTAR,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, src)
	if err == nil && n != fi.Size() {
		err = fmt.Errorf("%s changed while it was archived (%d bytes, %d expected)", f.path, n, fi.Size())
	}
	return err
}
