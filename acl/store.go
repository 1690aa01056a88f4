package acl

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// Files of the users and ACLs managed through the admin codes, under
// Options.Dir.
const (
	StoreFile = "acl.json" // users (secrets encrypted) and ACLs
	KeyFile   = "acl.key"  // the AES-256 key of the secrets, mode 0600
)

// encPrefix marks an encrypted secret in StoreFile: "v1:" then base64 of
// the AES-GCM nonce and sealed secret (the username is the additional
// data, so a secret cannot be moved to another user).
const encPrefix = "v1:"

// store is the users and ACLs created through the admin codes, persisted
// in Dir/acl.json whole on every change (durable: temporary file, fsync,
// rename, directory fsync; the previous version kept as .bak). HMAC needs
// the secret itself, so it cannot be hashed: it is encrypted with a key
// kept in another file (Dir/acl.key, created on first use, mode 0600).
// Someone who reads acl.json alone (a backup, a copied data directory
// without the key) learns no secret; someone who reads both does.
type store struct {
	fs   vfs.FS // Options.FS
	dir  string
	log  *slog.Logger
	aead cipher.AEAD // nil until a key exists

	users map[string]User
	acls  map[string]ACL
}

type storeDoc struct {
	Version int        `json:"version"`
	Users   []UserInfo `json:"users"`
	ACLs    []AclInfo  `json:"acls"`
}

func openStore(fsys vfs.FS, dir string, log *slog.Logger) (*store, error) {
	s := &store{fs: fsys, dir: dir, log: log, users: map[string]User{}, acls: map[string]ACL{}}
	if dir == "" {
		return s, nil // in memory (tests, or no data directory)
	}
	key, err := vfs.ReadFile(fsys, s.path(KeyFile))
	switch {
	case err == nil:
		if err := s.useKey(key); err != nil {
			return nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("acl: read %s: %w", s.path(KeyFile), err)
	}
	doc, found, _, err := durable.LoadWithBackup(s.fs, s.path(StoreFile), log, func(b []byte) (storeDoc, error) {
		var d storeDoc
		err := json.Unmarshal(b, &d)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("acl: load %s: %w", s.path(StoreFile), err)
	}
	if !found {
		return s, nil
	}
	for _, ui := range doc.Users {
		secret, err := s.open(ui.Username, ui.Password)
		if err != nil {
			return nil, fmt.Errorf("acl: %s, user %q: %w", s.path(StoreFile), ui.Username, err)
		}
		ui.Password = secret
		u, err := ui.user()
		if err != nil {
			return nil, fmt.Errorf("acl: %s: %w", s.path(StoreFile), err)
		}
		s.users[u.Name] = u
	}
	for _, ai := range doc.ACLs {
		a, err := ai.acl("")
		if err != nil {
			return nil, fmt.Errorf("acl: %s: %w", s.path(StoreFile), err)
		}
		s.acls[a.User] = a
	}
	return s, nil
}

func (s *store) path(name string) string { return strings.TrimSuffix(s.dir, "/") + "/" + name }

func (s *store) useKey(key []byte) error {
	if len(key) != 32 {
		return fmt.Errorf("acl: %s holds %d bytes, not a 32-byte key", s.path(KeyFile), len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return err
	}
	s.aead, err = cipher.NewGCM(block)
	return err
}

// ensureKey creates the key file on first need.
func (s *store) ensureKey() error {
	if s.aead != nil {
		return nil
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := durable.MkdirAll(s.fs, s.dir, 0o755); err != nil {
		return fmt.Errorf("acl: %w", err)
	}
	if err := durable.WriteFile(s.fs, s.path(KeyFile), key, durable.Perm(0o600)); err != nil {
		return fmt.Errorf("acl: write %s: %w", s.path(KeyFile), err)
	}
	return s.useKey(key)
}

func (s *store) seal(user, secret string) string {
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(secret)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return encPrefix + base64.StdEncoding.EncodeToString(s.aead.Seal(nonce, nonce, []byte(secret), []byte(user)))
}

func (s *store) open(user, sealed string) (string, error) {
	rest, ok := strings.CutPrefix(sealed, encPrefix)
	if !ok {
		return "", errors.New("the secret is not encrypted (v1:...)")
	}
	if s.aead == nil {
		return "", fmt.Errorf("the secret is encrypted but %s is missing", s.path(KeyFile))
	}
	raw, err := base64.StdEncoding.DecodeString(rest)
	if err != nil || len(raw) < s.aead.NonceSize() {
		return "", errors.New("the secret is not valid base64 of a nonce and ciphertext")
	}
	plain, err := s.aead.Open(nil, raw[:s.aead.NonceSize()], raw[s.aead.NonceSize():], []byte(user))
	if err != nil {
		return "", fmt.Errorf("the secret does not decrypt with %s (another key?)", s.path(KeyFile))
	}
	return string(plain), nil
}

// save writes the whole store.
func (s *store) save() error {
	if s.dir == "" {
		return nil
	}
	doc := storeDoc{Version: 1}
	if len(s.users) > 0 {
		if err := s.ensureKey(); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(s.users))
	for n := range s.users {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		u := s.users[n]
		ui := u.info(false)
		ui.Password = s.seal(u.Name, u.Password)
		doc.Users = append(doc.Users, ui)
	}
	subjects := make([]string, 0, len(s.acls))
	for n := range s.acls {
		subjects = append(subjects, n)
	}
	slices.Sort(subjects)
	for _, n := range subjects {
		a := s.acls[n]
		doc.ACLs = append(doc.ACLs, a.info())
	}
	data, err := json.MarshalIndent(&doc, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.MkdirAll(s.fs, s.dir, 0o755); err != nil {
		return fmt.Errorf("acl: %w", err)
	}
	if err := durable.WriteFile(s.fs, s.path(StoreFile), data, durable.Backup(durable.BakSuffix), durable.Perm(0o600)); err != nil {
		return fmt.Errorf("acl: write %s: %w", s.path(StoreFile), err)
	}
	return nil
}
