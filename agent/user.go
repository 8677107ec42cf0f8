package agent

import (
	"net/http"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// account is the guest user a process runs as.
type account struct {
	name     string
	uid, gid uint32
	groups   []uint32
	home     string
}

// lookupAccount resolves a user name from the guest's /etc/passwd and
// /etc/group.
func lookupAccount(name string) (*account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	acct := &account{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}
	if gids, err := u.GroupIds(); err == nil {
		for _, g := range gids {
			if n, err := strconv.ParseUint(g, 10, 32); err == nil {
				acct.groups = append(acct.groups, uint32(n))
			}
		}
	}
	return acct, nil
}

// decodeUnaryAs is decodeUnary followed by processAccount: the unary
// request in req and the account it runs as. On failure it writes the
// Connect error and returns false.
func (a *agent) decodeUnaryAs(w http.ResponseWriter, r *http.Request, req any) (*account, bool) {
	if !decodeUnary(w, r, req) {
		return nil, false
	}
	acct, err := a.processAccount(r)
	if err != nil {
		writeUnaryError(w, err)
		return nil, false
	}
	return acct, true
}

// processAccount is the account a request's process runs as: the user the
// e2b SDK names in "Authorization: Basic base64(user:)" (envd semantics)
// when the guest has that account, else Options.User. It is nil — run as
// the agent, in Options.Root — when neither resolves or when the agent
// cannot switch users (not root: the sim backend). A name the guest lacks
// falls back to the default rather than failing, because the SDK always
// names one ("user") and not every image has it.
func (a *agent) processAccount(r *http.Request) (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		if acct, err := lookupAccount(u); err == nil {
			return acct, nil
		}
	}
	return a.defaultAccount()
}

// defaultAccount is the account of a request that names none:
// Options.User, or nil (the agent's own) when that is empty or the agent
// cannot switch users.
func (a *agent) defaultAccount() (*account, error) {
	if os.Geteuid() != 0 || a.o.User == "" {
		return nil, nil
	}
	acct, err := lookupAccount(a.o.User)
	if err != nil {
		return nil, errorf(codeInvalidArgument, "user %q: %v", a.o.User, err)
	}
	return acct, nil
}

// credential is the SysProcAttr credential that runs a process as acct;
// nil when that is the agent's own user.
func (acct *account) credential() *syscall.Credential {
	if int(acct.uid) == os.Geteuid() && int(acct.gid) == os.Getegid() {
		return nil
	}
	return &syscall.Credential{Uid: acct.uid, Gid: acct.gid, Groups: acct.groups}
}
