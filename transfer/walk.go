package transfer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

// Entry is one item of a transfer: a directory or a regular file under the
// sender's root.
type Entry struct {
	Path string      // relative to the root, slash-separated, clean
	Dir  bool        // a directory (created empty; its contents are separate entries)
	Mode fs.FileMode // permission bits to create it with
	Size int64       // regular files: size when listed, bytes (a hint for progress)
}

// Decision is a Filter's verdict on one directory entry.
type Decision int

const (
	// Include the entry (and, for a directory, descend into it).
	Include Decision = iota
	// Exclude the entry entirely.
	Exclude
	// IncludeEmpty includes a directory but none of its contents (for a
	// symlink to a directory, a real directory with the target's mode).
	IncludeEmpty
)

// Filter decides what Walk lists. rel is the slash-separated path relative to
// the root; d describes the entry (from lstat: a symlink is a symlink).
type Filter func(rel string, d fs.DirEntry) Decision

// Walk lists root recursively in lexical order, parents before children,
// asking filter (nil: include everything) about every entry. Entries that
// vanish while the tree is listed are left out. Symbolic links are an error
// unless the filter excludes them or includes them empty; other special files
// (sockets, devices) are an error unless excluded.
func Walk(root string, filter Filter) ([]Entry, error) {
	var out []Entry
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		des, err := os.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && rel != "" {
				return nil // vanished while listing
			}
			return fmt.Errorf("transfer: walk %s: %w", dir, err)
		}
		for _, d := range des {
			r := d.Name()
			if rel != "" {
				r = path.Join(rel, d.Name())
			}
			dec := Include
			if filter != nil {
				dec = filter(r, d)
			}
			if dec == Exclude {
				continue
			}
			full := filepath.Join(dir, d.Name())
			info, err := os.Lstat(full)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return fmt.Errorf("transfer: walk: %w", err)
			}
			if info.Mode()&fs.ModeSymlink != 0 {
				if dec != IncludeEmpty {
					return fmt.Errorf("transfer: walk: symbolic link %s is not supported", full)
				}
				if info, err = os.Stat(full); err != nil {
					return fmt.Errorf("transfer: walk: %w", err)
				}
				if !info.IsDir() {
					return fmt.Errorf("transfer: walk: symbolic link %s does not point to a directory", full)
				}
			}
			switch {
			case info.IsDir():
				out = append(out, Entry{Path: r, Dir: true, Mode: info.Mode().Perm()})
				if dec == Include {
					if err := walk(full, r); err != nil {
						return err
					}
				}
			case info.Mode().IsRegular():
				out = append(out, Entry{Path: r, Mode: info.Mode().Perm(), Size: info.Size()})
			default:
				return fmt.Errorf("transfer: walk: special file %s (%v) is not supported", full, info.Mode().Type())
			}
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return nil, err
	}
	return out, nil
}
