package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hearthvm/hearth/internal/osthread"
	"golang.org/x/sys/unix"
)

// initArg0 is argv[0] of the re-executed driver binary that becomes a VM's
// pid 1 (see doc.go). Any binary that links this package can serve as it.
const initArg0 = "hearth-sim-init"

// In-VM paths.
const (
	guestHearthDir = "/.hearth"
	guestTokenFile = guestHearthDir + "/token"
	// guestEnvFile holds the VM's environment (vmm.Spec.Env) as a JSON
	// object, for the agent's --env-file.
	guestEnvFile = guestHearthDir + "/env"
	// guestBootIDFile holds this boot's id (initConfig.BootID), bound
	// read-only over guestBootID.
	guestBootIDFile = guestHearthDir + "/boot_id"
	// guestBootID is the kernel's boot id in the guest's /proc. The guest
	// shares the host's kernel, whose boot id it would otherwise read.
	guestBootID = "/proc/sys/kernel/random/boot_id"
	guestHome   = "/home/user"
	// guestAgentDir holds the agent executable: the overlay's top lower
	// layer, read-only and owned by an id the guest does not map.
	guestAgentDir = "/.hearth-agent"
	// logCap bounds how much agent output the init copies into agent.log.
	logCap = 4 << 20
	// guestFilesSoft and guestFilesHard are RLIMIT_NOFILE of every guest
	// process: soft 1024 (Docker's and systemd's default, so select()
	// works; a program that wants more raises it), hard 65536 (the guest's
	// root cannot raise a hard limit: that takes CAP_SYS_RESOURCE in the
	// host's user namespace).
	guestFilesSoft = 1024
	guestFilesHard = 65536
)

// initConfig is what the driver hands the init on fd 3, once the init is in
// the VM's cgroup. It carries the token and the VM's environment, so
// neither appears in argv or in the host's view of a process's env.
type initConfig struct {
	Rootfs    string   `json:"rootfs"`     // host path of the mounted overlay
	Agent     string   `json:"agent"`      // guest path of the agent executable
	AgentArgs []string `json:"agent_args"` // argv after the executable
	Env       []string `json:"env"`
	Token     string   `json:"token"`
	// AgentEnv is the VM's environment (vmm.Spec.Env), written to
	// guestEnvFile for the agent.
	AgentEnv map[string]string `json:"agent_env,omitempty"`
	Hostname string            `json:"hostname"`
	// ResolvConf, when set, is a guest path bound read-only over
	// /etc/resolv.conf (the egress lane's DNS, slirp's 10.0.2.3).
	ResolvConf string `json:"resolv_conf,omitempty"`
	UIDBase    int    `json:"uid_base"`
	UIDSize    int    `json:"uid_size"`
	// BootID is this start's boot id (a random UUID, new at every start
	// of the init), what the guest reads at guestBootID.
	BootID string `json:"boot_id"`
}

func init() {
	if len(os.Args) == 0 {
		return
	}
	if os.Args[0] == initArg0 {
		if err := runInit(); err != nil {
			fmt.Fprintln(os.Stderr, "hearth-sim-init:", err)
			os.Exit(111)
		}
		os.Exit(0)
	}
}

// initReservedThreads is how many OS threads the VM's init starts up
// front (osthread.Reserve).
const initReservedThreads = 8

// runInit is a VM's pid 1. It starts as host root in the VM's fresh mount,
// pid and uts namespaces (and the VM's network namespace), builds the guest's
// root (proc, a minimal /dev, /.hearth with the token and the agent), pivots
// into it, starts the agent in a new user namespace (root there is the host
// uid UIDBase), drops its privileges and reaps children until the agent exits.
func runInit() error {
	// The guest's processes share the VM's pids.max with this init: a
	// fork storm fills it, and the Go runtime dies when it cannot start a
	// thread (and the VM with its pid 1). Its few goroutines need few.
	osthread.Reserve(initReservedThreads)
	// No descriptor the driver inherited from its own parent may reach the
	// guest: everything past stdio is close-on-exec from here on. (fd 4 is
	// the write end of the VM's life pipe, kept for the init's lifetime.)
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			return fmt.Errorf("marking descriptors close-on-exec: %w", err)
		}
		for _, e := range ents {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				syscall.CloseOnExec(fd)
			}
		}
	}
	cf := os.NewFile(3, "config")
	var c initConfig
	err := json.NewDecoder(cf).Decode(&c)
	cf.Close()
	if err != nil {
		return fmt.Errorf("reading config (the driver went away?): %w", err)
	}
	if err := setupRoot(c); err != nil {
		return err
	}
	if c.ResolvConf != "" {
		if err := bindResolvConf(c.ResolvConf); err != nil {
			return err
		}
	}
	if err := unix.Sethostname([]byte(c.Hostname)); err != nil {
		return fmt.Errorf("sethostname: %w", err)
	}
	if err := provideHosts(c.Hostname, c.UIDBase); err != nil {
		return err
	}
	if err := limitFiles(); err != nil {
		return err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	name := filepath.Base(c.Agent)
	cmd := &exec.Cmd{
		Path:   c.Agent,
		Args:   append([]string{name}, c.AgentArgs...),
		Env:    c.Env,
		Dir:    "/",
		Stdout: pw,
		Stderr: pw,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWCGROUP,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: c.UIDBase, Size: c.UIDSize}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: c.UIDBase, Size: c.UIDSize}},
			GidMappingsEnableSetgroups: true,
			// Become the namespace's root (host uid UIDBase); without it the
			// agent would keep the host's root uid, unmapped in there.
			Credential: &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
			Setsid:     true,
			Pdeathsig:  syscall.SIGKILL,
		},
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting agent: %w", err)
	}
	pw.Close()

	go func() { // agent output → agent.log, capped; the rest is drained
		_, _ = io.Copy(os.Stdout, io.LimitReader(pr, logCap))
		_, _ = io.Copy(io.Discard, pr)
	}()
	// Nothing below needs privilege: become, for good, the host uid just
	// past the guests' range (no host account, no guest id), with no
	// capabilities. The guest cannot signal or ptrace it.
	_ = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	id := c.UIDBase + c.UIDSize
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setresgid(id, id, id); err != nil {
		return err
	}
	if err := syscall.Setresuid(id, id, id); err != nil {
		return err
	}
	agentPid := cmd.Process.Pid
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait: %w", err)
		}
		if pid == agentPid {
			fmt.Fprintln(os.Stderr, "hearth-sim-init: agent exited:", ws)
			if ws.Exited() {
				os.Exit(ws.ExitStatus())
			}
			os.Exit(128 + int(ws.Signal()))
		}
	}
}

// setupRoot mounts the guest's file systems under c.Rootfs and pivots into it.
func setupRoot(c initConfig) error {
	must := func(what string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := must("making / private", unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")); err != nil {
		return err
	}
	root := c.Rootfs
	if err := must("bind root", unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, "")); err != nil {
		return err
	}
	// Every mount point is resolved inside the root, no link followed, and
	// mounted onto by descriptor (see inroot.go): the guest owns its
	// writable layer, which persists, so /proc, /dev or /.hearth may be its
	// symlinks (to a host path, "../..", /proc/1/root/...), files or hard
	// links. Such an entry is replaced by a fresh directory; everything
	// deeper is made inside tmpfs mounted here.
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the root: %w", err)
	}
	defer unix.Close(rfd)
	if err := mountOn(rfd, "proc", 0o555, "proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return err
	}
	if err := mountOn(rfd, "dev", 0o755, "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=1m"); err != nil {
		return err
	}
	dev, err := openMounted(rfd, "dev")
	if err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	defer unix.Close(dev)
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		if err := createIn(dev, n, 0o666, nil, -1); err != nil {
			return err
		}
		fd, err := openBeneath(dev, n, unix.O_PATH, unix.RESOLVE_NO_XDEV)
		if err != nil {
			return fmt.Errorf("/dev/%s: %w", n, err)
		}
		err = must("bind /dev/"+n, unix.Mount("/dev/"+n, fdPath(fd), "", unix.MS_BIND, ""))
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	if err := mountOn(dev, "pts", 0o755, "devpts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return err
	}
	if err := mountOn(dev, "shm", 0o1777, "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return err
	}
	for link, target := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		_ = unix.Symlinkat(target, dev, link)
	}

	// /.hearth: tmpfs owned by the guest's root, 0700, holding the token
	// (0600). The agent executable comes with the overlay (/.hearth-agent).
	opts := fmt.Sprintf("mode=0700,uid=%d,gid=%d,size=1m", c.UIDBase, c.UIDBase)
	if err := mountOn(rfd, guestHearthDir[1:], 0o700, "tmpfs", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return err
	}
	hearth, err := openMounted(rfd, guestHearthDir[1:])
	if err != nil {
		return fmt.Errorf("%s: %w", guestHearthDir, err)
	}
	defer unix.Close(hearth)
	if err := createIn(hearth, path.Base(guestTokenFile), 0o600, []byte(c.Token), c.UIDBase); err != nil {
		return err
	}
	if len(c.AgentEnv) > 0 {
		b, err := json.Marshal(c.AgentEnv)
		if err != nil {
			return fmt.Errorf("%s: %w", guestEnvFile, err)
		}
		if err := createIn(hearth, path.Base(guestEnvFile), 0o600, b, c.UIDBase); err != nil {
			return err
		}
	}
	if err := bindBootID(rfd, hearth, c.BootID); err != nil {
		return err
	}

	if err := os.Chdir(root); err != nil {
		return err
	}
	if err := must("pivot_root", unix.PivotRoot(".", ".")); err != nil {
		return err
	}
	if err := must("detaching the host root", unix.Unmount(".", unix.MNT_DETACH)); err != nil {
		return err
	}
	return os.Chdir("/")
}

// bindBootID writes id to guestBootIDFile (owned by host root, 0444: the
// guest's root cannot change it) and binds that file read-only over
// guestBootID in the proc just mounted under rfd, so each start of a VM is
// a boot with an id of its own, as a VM's kernel has. Both ends are
// opened below their descriptors (the proc and the tmpfs are the init's
// fresh mounts, no guest data) and the bind goes onto the descriptor.
func bindBootID(rfd, hearth int, id string) error {
	if id == "" {
		return errors.New("no boot id in the init's config")
	}
	name := path.Base(guestBootIDFile)
	if err := createIn(hearth, name, 0o444, []byte(id+"\n"), -1); err != nil {
		return err
	}
	src, err := openBeneath(hearth, name, unix.O_PATH, unix.RESOLVE_NO_XDEV)
	if err != nil {
		return fmt.Errorf("%s: %w", guestBootIDFile, err)
	}
	defer unix.Close(src)
	proc, err := openMounted(rfd, "proc")
	if err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	defer unix.Close(proc)
	rel := strings.TrimPrefix(guestBootID, "/proc/")
	dst, err := openBeneath(proc, rel, unix.O_PATH, unix.RESOLVE_NO_XDEV)
	if errors.Is(err, unix.ENOENT) {
		return nil // a kernel without sysctl: no boot id to read anywhere
	}
	if err != nil {
		return fmt.Errorf("%s: %w", guestBootID, err)
	}
	err = unix.Mount(fdPath(src), fdPath(dst), "", unix.MS_BIND, "")
	unix.Close(dst)
	if err != nil {
		return fmt.Errorf("bind %s: %w", guestBootID, err)
	}
	// Remount read-only what is now mounted there (the bind's root).
	if dst, err = openBeneath(proc, rel, unix.O_PATH, 0); err != nil {
		return fmt.Errorf("%s: %w", guestBootID, err)
	}
	defer unix.Close(dst)
	return unix.Mount("", fdPath(dst), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// bindResolvConf binds src over /etc/resolv.conf, read-only, after
// pivot_root (every path is the guest's). /etc/resolv.conf is resolved in
// the root with no link followed and the bind goes onto its descriptor:
// only a real /etc and a regular (or missing) resolv.conf are touched, a
// guest-made symlink at either is left alone.
func bindResolvConf(src string) error {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	etc, err := openBeneath(root, "etc", unix.O_PATH|unix.O_DIRECTORY, unix.RESOLVE_NO_XDEV)
	if err != nil {
		return nil // no /etc, or a link: the guest's choice
	}
	defer unix.Close(etc)
	const name = "resolv.conf"
	fd, err := openBeneath(etc, name, unix.O_PATH, unix.RESOLVE_NO_XDEV)
	if errors.Is(err, unix.ENOENT) {
		if createIn(etc, name, 0o644, nil, -1) != nil {
			return nil
		}
		fd, err = openBeneath(etc, name, unix.O_PATH, unix.RESOLVE_NO_XDEV)
	}
	if err != nil {
		return nil // a link: left alone
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil
	}
	err = unix.Mount(src, fdPath(fd), "", unix.MS_BIND, "")
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("bind /etc/resolv.conf: %w", err)
	}
	// Remount read-only what is now mounted there (the bind's root).
	if fd, err = openBeneath(etc, name, unix.O_PATH, 0); err != nil {
		return fmt.Errorf("/etc/resolv.conf: %w", err)
	}
	defer unix.Close(fd)
	return unix.Mount("", fdPath(fd), "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
}

// limitFiles sets the RLIMIT_NOFILE the agent and every guest process
// inherit: guestFilesSoft/guestFilesHard, or the init's own hard limit
// where that is lower.
func limitFiles() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("getrlimit: %w", err)
	}
	lim.Max = min(lim.Max, guestFilesHard)
	lim.Cur = min(lim.Max, guestFilesSoft)
	// syscall.Setrlimit, not a raw call: it also stops os/exec from giving
	// the agent the soft limit the Go runtime saw at start.
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("setrlimit: %w", err)
	}
	return nil
}

// guestHostsFile is the /etc/hosts provideHosts binds for an image whose own
// does not name the hostname.
const guestHostsFile = guestHearthDir + "/hosts"

// provideHosts makes the guest's /etc/hosts name hostname (sudo and
// friends resolve it). An image whose /etc/hosts does (the built-in ones)
// keeps its own; otherwise (most OCI images: Docker writes the file when a
// container starts) /etc/hosts becomes a copy of the image's with
// "127.0.1.1 <hostname>" added, a file on the /.hearth tmpfs owned by the
// guest's root bound over it: writable, rewritten at every start, as in
// Docker. Runs after pivot_root, before any guest process: /etc/hosts is
// opened inside the guest's root and on its root mount (openat2
// RESOLVE_IN_ROOT|RESOLVE_NO_XDEV, a guest-made link cannot lead out) and
// the bind goes onto that descriptor (/proc/self/fd/N), never a path the
// kernel resolves again. A guest /etc/hosts that is no regular file, or a
// missing /etc, is left alone.
func provideHosts(hostname string, uid int) error {
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("/etc/hosts: %w", err)
	}
	defer unix.Close(root)
	in := unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS
	fd, err := unix.Openat2(root, "etc/hosts", &unix.OpenHow{
		Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC, Resolve: uint64(in)})
	if err == unix.ENOENT { // an empty mount point, the guest root's
		fd, err = unix.Openat2(root, "etc/hosts", &unix.OpenHow{
			Flags: unix.O_CREAT | unix.O_EXCL | unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Mode: 0o644, Resolve: uint64(in)})
		if err == nil {
			_ = unix.Fchown(fd, uid, uid)
		}
	}
	if err != nil {
		return nil // no /etc, or a link out of the root mount: the guest's choice
	}
	f := os.NewFile(uintptr(fd), "/etc/hosts")
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil
	}
	own, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil
	}
	if hostsNames(own, hostname) {
		return nil
	}
	body := hostsWith(own, hostname)
	if err := os.WriteFile(guestHostsFile, body, 0o644); err != nil {
		return fmt.Errorf("%s: %w", guestHostsFile, err)
	}
	if err := os.Chown(guestHostsFile, uid, uid); err != nil {
		return fmt.Errorf("%s: %w", guestHostsFile, err)
	}
	if err := unix.Mount(guestHostsFile, fmt.Sprintf("/proc/self/fd/%d", fd), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind /etc/hosts: %w", err)
	}
	return nil
}

// hostsNames reports whether a hosts file names host (an alias of any
// address, comments aside).
func hostsNames(hosts []byte, host string) bool {
	for _, line := range strings.Split(string(hosts), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		for _, name := range f[min(1, len(f)):] {
			if strings.EqualFold(name, host) {
				return true
			}
		}
	}
	return false
}

// hostsWith returns hosts (the localhost lines when empty) with a line
// naming host at 127.0.1.1, as Debian's installer writes it.
func hostsWith(hosts []byte, host string) []byte {
	if len(strings.TrimSpace(string(hosts))) == 0 {
		hosts = []byte("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	}
	out := append([]byte(nil), hosts...)
	if out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, "127.0.1.1\t"+host+"\n"...)
}
