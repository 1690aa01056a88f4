package broker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Names of the managers' files under DataDir/config (RocketMQ's names and shapes).
const (
	configDirName          = "config"
	topicsFileName         = "topics.json"
	subscriptionGroupsName = "subscriptionGroup.json"
	consumerOffsetFileName = "consumerOffset.json"
)

// writeFileAtomic replaces path with data so that a crash leaves either the
// old or the new contents: write a temporary file in the same directory,
// fsync it, rename it over path, fsync the directory.
func writeFileAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("broker: write %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("broker: write %s: sync directory: %w", path, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("broker: write %s: sync directory: %w", path, err)
	}
	return nil
}

// readConfigFile returns the file's contents, or nil when it does not exist.
func readConfigFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("broker: read %s: %w", path, err)
	}
	return b, nil
}

// defaultMemoryWindow is 40% of 8 GiB, for platforms where RAM is unknown.
const defaultMemoryWindow = 8 << 30 * 40 / 100
