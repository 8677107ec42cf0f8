package devserver

import (
	"crypto/rand"
	"encoding/base64"
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
	return loadOrCreate(path, randomHex)
}

// randomHex is 24 random bytes in hex.
func randomHex() (string, error) {
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	return hex.EncodeToString(buf), nil
}

// loadOrCreate returns the first non-comment line of path, creating the
// file (0600) with newSecret's value when it does not exist.
func loadOrCreate(path string, newSecret func() (string, error)) (string, error) {
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
	s, err := newSecret()
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(path, []byte(s+"\n"), 0o600); err != nil {
		return "", err
	}
	return s, nil
}

// writeKubeconfig writes a kubeconfig (0600) for the dev API server whose
// user carries token as a plain bearer token. caPEM verifies the serving
// certificate; without it verification is skipped.
func writeKubeconfig(path, server string, caPEM []byte, userName, token string) error {
	trust := "insecure-skip-tls-verify: true"
	if len(caPEM) > 0 {
		trust = "certificate-authority-data: " + base64.StdEncoding.EncodeToString(caPEM)
	}
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: sandbox-dev
  cluster:
    server: %s
    %s
users:
- name: %[3]s
  user:
    token: %[4]s
contexts:
- name: %[3]s
  context:
    cluster: sandbox-dev
    user: %[3]s
    namespace: default
current-context: %[3]s
`, server, trust, userName, token)
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
