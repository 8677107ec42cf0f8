package agent

import (
	"os"
	"path/filepath"
)

// Ownership of what the agent creates, as envd does it: a file or
// directory the agent creates for a request (files.write, makeDir, the
// parents a write or move creates) belongs to the request's account
// (processAccount), so the commands that account runs can use it. With
// no account (the agent is not root, or none is configured) the agent's
// own user keeps it.

// mkdirAllAs is os.MkdirAll giving each directory it creates to acct.
func mkdirAllAs(dir string, acct *account) error {
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := len(missing) - 1; i >= 0; i-- {
		chownTo(missing[i], acct)
	}
	return nil
}

// chownTo gives path to acct (nil: leaves it); a failure leaves the
// agent's ownership, which is what the agent could do.
func chownTo(path string, acct *account) {
	if acct == nil || acct.credential() == nil {
		return
	}
	_ = os.Lchown(path, int(acct.uid), int(acct.gid))
}
