package kubectlsandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
)

// quote makes one sh -c command of argv: each word single-quoted, so the
// program gets exactly the words given (the runtime API runs a string).
func quote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// Exec runs argv in sandbox name through the router (POST /execute, as
// sh -c of the quoted words) and returns its output and exit code.
func (p *Plugin) Exec(ctx context.Context, name string, argv []string) (Result, error) {
	if len(argv) == 0 {
		return Result{}, errors.New("no command: kubectl sandbox exec NAME -- COMMAND [ARG...]")
	}
	r, err := p.router(name)
	if err != nil {
		return Result{}, err
	}
	return r.execute(ctx, quote(argv))
}

func (p *Plugin) execCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "exec NAME -- COMMAND [ARG...]",
		Short: "Run a command in a sandbox (no stdin or terminal; its output when it ends) and exit with its status",
		Long: "Run a command in a sandbox through the gateway's router, as sh -c of the quoted words.\n" +
			"Needs create on sandboxes/exec. Prints the command's stdout and stderr when it ends, and exits with its exit code.",
		Args: cobra.MinimumNArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			if c.ArgsLenAtDash() != 1 {
				return errors.New("usage: kubectl sandbox exec NAME -- COMMAND [ARG...]")
			}
			res, err := p.Exec(c.Context(), args[0], args[1:])
			if err != nil {
				return err
			}
			if _, err := io.WriteString(p.Out, res.Stdout); err != nil {
				return err
			}
			if _, err := io.WriteString(p.ErrOut, res.Stderr); err != nil {
				return err
			}
			if res.ExitCode != 0 {
				return &ExitError{Code: res.ExitCode}
			}
			return nil
		},
	}
}

// remote is one side of cp: [NAMESPACE/]NAME:PATH.
type remote struct {
	namespace, name, path string
}

// parseRemote reports whether arg names a sandbox's file: the part before
// the first colon is a sandbox name, optionally after a namespace and a
// slash. Anything else ("./a:b", "/tmp/x", "C:") is a local path.
func parseRemote(arg string) (remote, bool) {
	ref, p, ok := strings.Cut(arg, ":")
	if !ok || ref == "" {
		return remote{}, false
	}
	ns, name, hasNS := strings.Cut(ref, "/")
	if !hasNS {
		ns, name = "", ref
	} else if len(apivalidation.ValidateNamespaceName(ns, false)) > 0 {
		return remote{}, false
	}
	if len(apivalidation.NameIsDNSSubdomain(name, false)) > 0 {
		return remote{}, false
	}
	return remote{namespace: ns, name: name, path: p}, true
}

// CopyTo uploads src (a local file, or stdin for "-") to path in sandbox
// name; an empty path is the local file's base name in the guest user's
// home.
func (p *Plugin) CopyTo(ctx context.Context, src, name, dst string) error {
	var in io.Reader = p.In
	if src != "-" {
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil {
			return err
		} else if !st.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file: cp copies one file", src)
		}
		in = f
		if dst == "" {
			dst = filepath.Base(src)
		}
	}
	if dst == "" {
		return errors.New("copying stdin needs a path in the sandbox: NAME:PATH")
	}
	r, err := p.router(name)
	if err != nil {
		return err
	}
	return r.upload(ctx, dst, in)
}

// CopyFrom downloads path of sandbox name to dst: stdout for "-", into a
// directory under the file's base name, else the file dst — written in
// full to a temporary file beside it and renamed, so a failed copy leaves
// no partial file.
func (p *Plugin) CopyFrom(ctx context.Context, name, src, dst string) error {
	if src == "" {
		return errors.New("a path in the sandbox is required: NAME:PATH")
	}
	r, err := p.router(name)
	if err != nil {
		return err
	}
	if dst == "-" {
		return r.download(ctx, src, p.Out)
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		base := path.Base(src)
		if base == "/" || base == "." || base == ".." {
			return fmt.Errorf("%s names no file", src)
		}
		dst = filepath.Join(dst, base)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".kubectl-sandbox-cp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a rename: nothing
	if err := r.download(ctx, src, tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func (p *Plugin) cpCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy one file to or from a sandbox: cp FILE [NAMESPACE/]NAME:PATH or cp [NAMESPACE/]NAME:PATH FILE (- is stdin or stdout)",
		Long: "Copy one file to or from a sandbox through the gateway's router (needs create on sandboxes/exec).\n" +
			"A relative PATH is under the guest user's home. Directories are not copied.",
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			from, fromOK := parseRemote(args[0])
			to, toOK := parseRemote(args[1])
			switch {
			case fromOK == toOK:
				return errors.New("exactly one of SRC and DST must be [NAMESPACE/]NAME:PATH")
			case toOK:
				if err := p.withNamespace(to.namespace); err != nil {
					return err
				}
				return p.CopyTo(c.Context(), args[0], to.name, to.path)
			default:
				if err := p.withNamespace(from.namespace); err != nil {
					return err
				}
				return p.CopyFrom(c.Context(), from.name, from.path, args[1])
			}
		},
	}
}

// withNamespace makes ns (cp's NAMESPACE/ prefix) the namespace, unless
// empty; with -n naming another, it is an error.
func (p *Plugin) withNamespace(ns string) error {
	if ns == "" {
		return nil
	}
	if p.Flags.Namespace != nil && *p.Flags.Namespace != "" && *p.Flags.Namespace != ns {
		return fmt.Errorf("namespace %q in the path and -n %q differ", ns, *p.Flags.Namespace)
	}
	p.Flags.Namespace = &ns
	return nil
}

// parsePorts parses port-forward's [LOCAL:]REMOTE; LOCAL 0 picks a free
// port, LOCAL absent is REMOTE.
func parsePorts(arg string) (local, remote int, err error) {
	l, r, ok := strings.Cut(arg, ":")
	if !ok {
		l, r = arg, arg
	}
	remote, err = strconv.Atoi(r)
	if err != nil || remote < 1 || remote > 65535 {
		return 0, 0, fmt.Errorf("port %q: the sandbox's port must be 1-65535", arg)
	}
	local, err = strconv.Atoi(l)
	if l == "" {
		local, err = 0, nil
	}
	if err != nil || local < 0 || local > 65535 {
		return 0, 0, fmt.Errorf("port %q: the local port must be 0-65535", arg)
	}
	return local, remote, nil
}

// PortForward serves HTTP on ln until ctx ends, sending each request
// through the router to port of sandbox name (create sandboxes/portforward;
// port 8888 and 49999 are sandboxes/exec).
func (p *Plugin) PortForward(ctx context.Context, ln net.Listener, name string, port int) error {
	r, err := p.router(name)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r.forwarder(port), ReadHeaderTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err = srv.Serve(ln)
	<-done
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func (p *Plugin) portForwardCommand() *cobra.Command {
	address := "127.0.0.1"
	c := &cobra.Command{
		Use:   "port-forward NAME [LOCAL:]REMOTE",
		Short: "Serve a sandbox's HTTP port on a local port, through the gateway's router (HTTP and WebSocket, not raw TCP)",
		Long: "Listen on a local port and send each HTTP request through the gateway's router to the sandbox's port\n" +
			"(needs create on sandboxes/portforward). Streams and WebSocket upgrades pass; raw TCP does not. Runs until interrupted.",
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			local, remote, err := parsePorts(args[1])
			if err != nil {
				return err
			}
			if _, err := p.router(args[0]); err != nil {
				return err // before listening
			}
			ln, err := net.Listen("tcp", net.JoinHostPort(address, strconv.Itoa(local)))
			if err != nil {
				return err
			}
			fmt.Fprintf(p.Out, "Forwarding from %s -> %d\n", ln.Addr(), remote)
			return p.PortForward(c.Context(), ln, args[0], remote)
		},
	}
	c.Flags().StringVar(&address, "address", address, "the local address to listen on")
	return c
}
