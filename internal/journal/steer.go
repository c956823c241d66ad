package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// The steering file: beside the journal, a node keeps what people asked
// of it (docs/STEERING.md): a hold, the approvals given, a pause. It is
// small and changes at the pace of people, so it is rewritten whole on
// every change: a temporary file, fsynced, renamed over "steer", and the
// directory fsynced, so that a crash leaves the old content or the new,
// never a mix. The content is the caller's (the node writes JSON).

// maxSteer bounds the steering file.
const maxSteer = 1 << 20

// SaveSteer replaces the steering file with data, durably.
func (j *Journal) SaveSteer(data []byte) error {
	if len(data) > maxSteer {
		return fmt.Errorf("chainsync: steering state too large (%d bytes)", len(data))
	}
	f, err := openIn(j.d, "steer.tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return openErr(j.dir, "steer.tmp", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = j.sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameIn(j.d, "steer.tmp", "steer")
	}
	if err == nil {
		err = j.sync(j.d)
	}
	if err != nil {
		return fmt.Errorf("chainsync: cannot write the steering state in %s: %w", j.dir, err)
	}
	return nil
}

// LoadSteer returns the steering file's content, nil if there is none.
func (j *Journal) LoadSteer() ([]byte, error) {
	f, err := openIn(j.d, "steer", os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, openErr(j.dir, "steer", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSteer+1))
	if err != nil {
		return nil, fmt.Errorf("chainsync: cannot read the steering state in %s: %w", j.dir, err)
	}
	if len(data) > maxSteer {
		return nil, fmt.Errorf("%w: %s/steer is larger than %d bytes", ErrCorrupt, j.dir, maxSteer)
	}
	return data, nil
}

// ReadSteer returns the steering file of the state directory dir, read
// without its lock and without writing (chainsync journal), nil if there
// is none. A symbolic link in its place is refused, never followed.
func ReadSteer(dir string) ([]byte, error) {
	path := filepath.Join(dir, "steer")
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrUnsafe, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxSteer))
}
