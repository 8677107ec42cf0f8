package devserver

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// loadOrCreateSecret returns the first non-comment line of path, creating
// the file (0600) with a fresh random secret when it does not exist.
func loadOrCreateSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				return line, nil
			}
		}
		return "", fmt.Errorf("%s holds no secret", path)
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	s := hex.EncodeToString(buf)
	if err := writeFileAtomic(path, []byte(s+"\n"), 0o600); err != nil {
		return "", err
	}
	return s, nil
}

// writeKubeconfig writes a kubeconfig for the dev API server. The user
// carries a dummy token: the server authenticates nobody, and an empty
// user makes kubectl prompt for a password.
func writeKubeconfig(path, server string) error {
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: sandbox-dev
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: sandbox-dev
  user:
    token: sandbox-dev
contexts:
- name: sandbox-dev
  context:
    cluster: sandbox-dev
    user: sandbox-dev
    namespace: default
current-context: sandbox-dev
`, server)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return writeFileAtomic(path, []byte(kc), 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
