package secure

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// staged is a file written and synced under a temporary name in the
// directory of its final path, not yet in place.
type staged struct {
	path, tmp string
	data      []byte
	perm      fs.FileMode
}

// stage writes data to a new temporary file beside path, with exactly mode
// perm (not subject to the umask), and syncs it.
func stage(path string, data []byte, perm fs.FileMode) (*staged, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return nil, fmt.Errorf("secure: cannot write %s: %w", path, err)
	}
	s := &staged{path: path, tmp: f.Name(), data: data, perm: perm}
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(s.tmp)
		return nil, fmt.Errorf("secure: writing %s: %w", path, err)
	}
	return s, nil
}

// discard removes the temporary files of ss that are still there.
func discard(ss []*staged) {
	for _, s := range ss {
		os.Remove(s.tmp)
	}
}

// commit puts the staged files in place and syncs their directories, so
// that after a crash each file is either absent or complete. All or
// nothing: if one file cannot be put in place, every name is left as it
// was (new names removed, replaced files restored).
//
// Without overwrite, no existing file is replaced: each file is hard-linked
// to its name, which fails if the name exists (no check-then-rename race).
// With overwrite, an existing file is first hard-linked to a backup name,
// then the new one is renamed over it; the backups are removed at the end.
// Either way no temporary file is left when commit returns.
func commit(ss []*staged, overwrite bool) error {
	defer discard(ss)
	type undo struct{ path, backup string } // backup "" : remove path
	var done []undo
	var backups []string
	defer func() {
		for _, b := range backups {
			os.Remove(b)
		}
	}()
	var err error
	for _, s := range ss {
		if !overwrite {
			if err = place(s); err != nil {
				break
			}
			done = append(done, undo{path: s.path})
			continue
		}
		u := undo{path: s.path}
		if _, serr := os.Lstat(s.path); serr == nil {
			u.backup = s.tmp + ".old"
			if err = os.Link(s.path, u.backup); err != nil {
				err = fmt.Errorf("secure: cannot keep a copy of %s while replacing it: %w", s.path, err)
				break
			}
			backups = append(backups, u.backup)
		}
		if err = os.Rename(s.tmp, s.path); err != nil {
			err = fmt.Errorf("secure: cannot replace %s: %w", s.path, err)
			break
		}
		done = append(done, u)
	}
	if err != nil {
		for i := len(done) - 1; i >= 0; i-- {
			if u := done[i]; u.backup == "" {
				os.Remove(u.path)
			} else {
				os.Rename(u.backup, u.path)
			}
		}
	}
	if serr := syncDirs(ss); err == nil {
		err = serr
	}
	return err
}

// place links s to its name, refusing an existing one. On file systems
// without hard links it creates the name exclusively and writes it.
func place(s *staged) error {
	err := os.Link(s.tmp, s.path)
	if err == nil {
		return nil
	}
	if errors.Is(err, fs.ErrExist) {
		return existErr(s.path)
	}
	f, oerr := os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, s.perm)
	if oerr != nil {
		if errors.Is(oerr, fs.ErrExist) {
			return existErr(s.path)
		}
		return fmt.Errorf("secure: %w", oerr)
	}
	werr := f.Chmod(s.perm)
	if werr == nil {
		_, werr = f.Write(s.data)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(s.path)
		return fmt.Errorf("secure: writing %s: %w", s.path, werr)
	}
	return nil
}

// syncDirs syncs the directories of ss, so that the new names survive a
// crash.
func syncDirs(ss []*staged) error {
	var dirs []string
	for _, s := range ss {
		if d := filepath.Dir(s.path); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		f, err := os.Open(d)
		if err != nil {
			return fmt.Errorf("secure: %w", err)
		}
		err = f.Sync()
		f.Close()
		if err != nil && !errors.Is(err, fs.ErrInvalid) {
			return fmt.Errorf("secure: syncing directory %s: %w", d, err)
		}
	}
	return nil
}

// existErr is the error for a file that exists and may not be replaced: a
// *fs.PathError (Path names the file) that wraps fs.ErrExist.
func existErr(path string) error {
	return fmt.Errorf("secure: %w", &fs.PathError{Op: "refusing to overwrite", Path: path, Err: fs.ErrExist})
}

// writeFile writes data to path with exactly mode perm, synced, replacing
// an existing file only if overwrite is true.
func writeFile(path string, data []byte, perm fs.FileMode, overwrite bool) error {
	s, err := stage(path, data, perm)
	if err != nil {
		return err
	}
	return commit([]*staged{s}, overwrite)
}
