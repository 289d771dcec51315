// Package cgroupid maps the cgroup ids that the kernel hands to eBPF programs
// (the kernfs node id, which is the inode number of the cgroup's directory, in
// cgroup v2 and in v1's perf_event hierarchy alike) to cgroup paths, by walking
// the mounted hierarchy. Paths are written as in /proc/<pid>/cgroup: relative to
// the hierarchy's root, with a leading slash ("/" is the root). Only the
// filesystem is read; ids of cgroups created in between are found by walking
// again, and a cgroup missing from the latest walk has been removed (kernfs
// ids are 64-bit and never reused).
package cgroupid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Resolver holds the id -> path table of the latest walk.
type Resolver struct {
	root  string
	paths map[uint64]string
}

// New resolves ids under root, the hierarchy's mount point (in a container, the
// host's hierarchy mounted somewhere, so that every id on the node resolves).
func New(root string) *Resolver {
	return &Resolver{root: root, paths: map[uint64]string{}}
}

// Walk rereads the whole hierarchy. Cgroups removed while it walks are
// skipped; only an unreadable root is an error, and then the previous table
// is kept.
func (r *Resolver) Walk() error {
	paths := make(map[uint64]string, len(r.paths))
	err := filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == r.root {
				return err
			}
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed during the walk
			}
			return nil // unreadable subtree: its cgroups stay unresolved
		}
		if !d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("cgroup %s: no inode number", p)
		}
		rel, _ := filepath.Rel(r.root, p)
		if rel == "." {
			rel = ""
		}
		paths[st.Ino] = "/" + filepath.ToSlash(rel)
		return nil
	})
	if err != nil {
		return fmt.Errorf("walk the cgroup hierarchy at %s: %w", r.root, err)
	}
	r.paths = paths
	return nil
}

// Check drops from the table the cgroups removed since they were found (a
// directory gone, or replaced by a new cgroup of the same name), with one
// stat per known cgroup: much cheaper than a walk, which lists every
// cgroup's interface files. New cgroups need a walk. Only an unreadable root
// is an error, and then the table is kept.
func (r *Resolver) Check() error {
	if _, err := os.Stat(r.root); err != nil {
		return fmt.Errorf("check the cgroup hierarchy at %s: %w", r.root, err)
	}
	for id, p := range r.paths {
		if got, err := ID(filepath.Join(r.root, filepath.FromSlash(p))); err != nil || got != id {
			delete(r.paths, id)
		}
	}
	return nil
}

// Path returns the path of the cgroup with id as of the latest walk.
func (r *Resolver) Path(id uint64) (string, bool) {
	p, ok := r.paths[id]
	return p, ok
}

// Len is the number of cgroups the latest walk found.
func (r *Resolver) Len() int { return len(r.paths) }

// ID returns the id of the cgroup at dir (a directory of a cgroup hierarchy).
func ID(dir string) (uint64, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("cgroup id: %w", err)
	}
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || !info.IsDir() {
		return 0, fmt.Errorf("cgroup id of %s: not a cgroup directory", dir)
	}
	return st.Ino, nil
}
