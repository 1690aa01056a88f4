package namesrv

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"

	"github.com/apogeemq/apogee/internal/durable"
)

// KVConfigFileName is the name of the KV config's file in a standalone name server's
// data directory (RocketMQ's default kvConfigPath is ~/namesrv/kvConfig.json).
const KVConfigFileName = "kvConfig.json"

// kvFile is the KV config on disk, in the shape of RocketMQ's kvConfig.json
// (KVConfigSerializeWrapper): {"configTable":{"namespace":{"key":"value"}}}. A file
// written by a Java name server loads here, and one written here loads there.
type kvFile struct {
	ConfigTable map[string]map[string]string `json:"configTable"`
}

// parseKVFile decodes a kvConfig.json. An empty or malformed file fails (Load then
// falls back to the .bak); empty namespaces are dropped, since the registry keeps a
// namespace exactly while it has keys.
func parseKVFile(b []byte) (map[string]map[string]string, error) {
	var f kvFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, err
	}
	kv := make(map[string]map[string]string, len(f.ConfigTable))
	for ns, m := range f.ConfigTable {
		if len(m) > 0 {
			kv[ns] = m
		}
	}
	return kv, nil
}

// OpenRegistry returns a registry as NewRegistry does and, when opts.KVConfigPath is
// set, loads the KV config from that file (creating its directory durably if needed): a
// missing file is an empty config; a damaged one falls back to its .bak with a WARN
// and is written again from what was loaded; it fails when neither parses (see
// package internal/durable, LoadWithBackup). Every later change of the KV config is written to the
// file before it is answered (see Options.KVConfigPath).
func OpenRegistry(opts Options) (*Registry, error) {
	path := opts.KVConfigPath
	opts.KVConfigPath = ""
	r := NewRegistry(opts)
	if path == "" {
		return r, nil
	}
	fail := func(err error) (*Registry, error) {
		r.Close()
		return nil, fmt.Errorf("namesrv: kv config: %w", err)
	}
	if err := durable.MkdirAll(r.opts.FS, filepath.Dir(path), 0o755); err != nil {
		return fail(err)
	}
	kv, found, fellBack, err := durable.LoadWithBackup(r.opts.FS, path, r.log, parseKVFile)
	if err != nil {
		return fail(err)
	}
	if found {
		r.kv = kv
	}
	r.kvPath = path
	if fellBack {
		if err := r.writeKV(kv); err != nil {
			return fail(err)
		}
	}
	n := 0
	for _, m := range r.kv {
		n += len(m)
	}
	r.log.Info("namesrv: kv config loaded", "file", path, "namespaces", len(r.kv), "keys", n)
	return r, nil
}

// writeKV writes kv to the KV config's file. The caller holds kvMu (or is OpenRegistry).
func (r *Registry) writeKV(kv map[string]map[string]string) error {
	b, err := json.Marshal(kvFile{ConfigTable: kv}) // keys sorted: the same table, the same bytes
	if err != nil {
		return err
	}
	return durable.WriteFile(r.opts.FS, r.kvPath, b, durable.Backup(durable.BakSuffix))
}

// errKVNotPersisted wraps the failure to write a KV change, which is then not applied.
var errKVNotPersisted = errors.New("namesrv: kv config change not applied: it could not be written")

// changeKV sets namespace ns's key to value, or deletes it (del), and returns whether
// anything changed. The change builds a new table (sharing the namespaces it does not
// change) and, with a KV file, writes it before it replaces the current one: a change
// is visible to readers exactly when it is on disk, and one that cannot be written is
// not applied (the error wraps errKVNotPersisted). KV changes are serialised by kvMu;
// readers wait only while the new table is built and swapped in, never for the write.
// Namespace maps reachable from r.kv are never modified once published.
func (r *Registry) changeKV(ns, key, value string, del bool) (bool, error) {
	r.kvMu.Lock()
	defer r.kvMu.Unlock()

	// Only changeKV replaces r.kv, under kvMu: the table read here stays current
	// until the swap below.
	r.mu.RLock()
	cur := r.kv
	r.mu.RUnlock()
	old, had := cur[ns][key]
	if (del && !had) || (!del && had && old == value) {
		return false, nil
	}
	next := make(map[string]map[string]string, len(cur)+1)
	maps.Copy(next, cur)
	m := maps.Clone(cur[ns])
	if m == nil {
		m = make(map[string]string, 1)
	}
	if del {
		delete(m, key)
	} else {
		m[key] = value
	}
	if len(m) == 0 {
		delete(next, ns)
	} else {
		next[ns] = m
	}

	if r.kvPath != "" {
		if err := r.writeKV(next); err != nil {
			r.log.Error("namesrv: kv config not written; the change is refused", "file", r.kvPath,
				"namespace", ns, "key", key, "delete", del, "err", err)
			return false, fmt.Errorf("%w: %w", errKVNotPersisted, err)
		}
	}

	r.mu.Lock()
	r.kv = next
	r.gen++ // an order-topic config changes that topic's route
	r.mu.Unlock()
	if del {
		r.log.Info("namesrv: kv config deleted", "namespace", ns, "key", key)
	} else {
		r.log.Info("namesrv: kv config put", "namespace", ns, "key", key, "value", value)
	}
	return true, nil
}
