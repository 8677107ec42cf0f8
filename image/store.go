package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Store resolves image references to root filesystems cached under Root.
// The zero value is not usable: Root is required. A Store is safe for
// concurrent use, also by several processes sharing Root.
type Store struct {
	// Root is the cache directory (see the package doc for its layout).
	Root string
	// ProbeTimeout bounds the registry look-up for DefaultRef before it
	// falls back to the built-in image. Zero means 3 seconds.
	ProbeTimeout time.Duration
	// Remote are extra options for registry access (auth, transport).
	Remote []remote.Option
	// Progress receives progress lines of a built-in build Resolve starts
	// (nil: discarded).
	Progress io.Writer
	// Refresh is how long a resolved reference is reused before Resolve
	// asks its registry again (a tag may move). Zero means 5 minutes;
	// negative asks every time. VM backends resolve on every boot, so this
	// keeps a warm-pool fill off the network.
	Refresh time.Duration

	mu   sync.Mutex
	memo map[string]memoEntry
}

// memoEntry is a reference's last resolution.
type memoEntry struct {
	r  Rootfs
	at time.Time
}

// Rootfs is a flattened root filesystem in the cache. Dir is shared
// read-only by every VM of the template.
type Rootfs struct {
	Ref       string // the reference it was resolved from
	Digest    string // "sha256:<hex>" of the image manifest; "builtin:<hex>" for the built-in
	Dir       string // the root directory
	OSRelease string // PRETTY_NAME from its os-release, "" when it has none
}

// ErrNotFound is matched (errors.Is) by every *NotFoundError.
var ErrNotFound = errors.New("image not found")

// NotFoundError reports a reference that could not be resolved: the registry
// has no such image, or could not be reached and the cache holds no copy.
type NotFoundError struct {
	Ref         string
	Unreachable bool // the registry could not be reached (vs. said "no such image")
	Err         error
}

func (e *NotFoundError) Error() string {
	why := "not found"
	if e.Unreachable {
		why = "registry unreachable and not cached"
	}
	return fmt.Sprintf("image %s: %s: %v", e.Ref, why, e.Err)
}

func (e *NotFoundError) Unwrap() error        { return e.Err }
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// DefaultRoot is the cache directory used when none is configured:
// $HEARTH_IMAGE_CACHE, else <user cache dir>/hearth/images.
func DefaultRoot() string {
	if d := os.Getenv("HEARTH_IMAGE_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "hearth", "images")
	}
	return filepath.Join(os.TempDir(), "hearth-images")
}

// Resolve returns the root filesystem of ref, pulling and unpacking it on a
// cache miss. Order: BuiltinRef is the built-in image; any other reference
// is looked up in its registry (DefaultRef only for ProbeTimeout); if the
// registry cannot give it, a previously pulled or imported copy of ref is
// used; failing that, DefaultRef falls back to the built-in image and any
// other reference is a *NotFoundError. The built-in image is built if it is
// not cached yet (minutes; progress to s.Progress).
func (s *Store) Resolve(ctx context.Context, ref string) (Rootfs, error) {
	refresh := s.Refresh
	if refresh == 0 {
		refresh = 5 * time.Minute
	}
	s.mu.Lock()
	m, ok := s.memo[ref]
	s.mu.Unlock()
	if ok && refresh > 0 && time.Since(m.at) < refresh {
		if _, err := os.Stat(m.r.Dir); err == nil {
			return m.r, nil
		}
	}
	r, err := s.resolve(ctx, ref)
	if err == nil {
		s.mu.Lock()
		if s.memo == nil {
			s.memo = map[string]memoEntry{}
		}
		s.memo[ref] = memoEntry{r: r, at: time.Now()}
		s.mu.Unlock()
	}
	return r, err
}

func (s *Store) resolve(ctx context.Context, ref string) (Rootfs, error) {
	if isBuiltin(ref) {
		r, err := s.BuildDefault(ctx, s.Progress)
		r.Ref = ref
		return r, err
	}
	nref, err := parseRef(ref)
	if err != nil {
		return Rootfs{}, err
	}
	pctx := ctx
	if isDefault(ref) {
		t := s.ProbeTimeout
		if t == 0 {
			t = 3 * time.Second
		}
		var cancel context.CancelFunc
		pctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	r, perr := s.pull(pctx, ctx, nref, ref)
	if perr == nil {
		return r, nil
	}
	if ctx.Err() != nil {
		return Rootfs{}, ctx.Err()
	}
	if r, ok := s.cached(ref, nref); ok {
		return r, nil
	}
	if isDefault(ref) {
		r, err := s.BuildDefault(ctx, s.Progress)
		r.Ref = ref
		return r, err
	}
	return Rootfs{}, perr
}

// Import unpacks the image in an OCI image layout directory or a `docker
// save` tarball at path, records it under its reference (the layout's
// org.opencontainers.image.ref.name annotation, or the tarball's tag) so a
// later Resolve of that reference finds it offline, and returns it. An image
// with no reference gets Ref "" and is found by digest only.
func (s *Store) Import(ctx context.Context, path string) (Rootfs, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Rootfs{}, fmt.Errorf("image import: %w", err)
	}
	var img v1.Image
	var ref string
	if fi.IsDir() {
		img, ref, err = fromLayout(path)
	} else {
		img, ref, err = fromTarball(path)
	}
	if err != nil {
		return Rootfs{}, fmt.Errorf("image import %s: %w", path, err)
	}
	r, err := s.unpackImage(ctx, img, ref)
	if err != nil {
		return Rootfs{}, fmt.Errorf("image import %s: %w", path, err)
	}
	if ref != "" {
		if nref, err := parseRef(ref); err == nil {
			if err := s.remember(nref, r.Digest); err != nil {
				return Rootfs{}, err
			}
		}
	}
	return r, nil
}

// Lookup returns the cached rootfs of a digest ("sha256:<hex>" or
// "builtin:<hex>") without any network access.
func (s *Store) Lookup(digest string) (Rootfs, bool) {
	dir := s.rootfsDir(digest)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return Rootfs{}, false
	}
	return Rootfs{Digest: digest, Dir: dir, OSRelease: osRelease(dir)}, true
}

// pull fetches ref's manifest under pctx and, on a cache miss, its layers
// under ctx (the probe timeout bounds finding the image, not downloading it).
func (s *Store) pull(pctx, ctx context.Context, nref name.Reference, ref string) (Rootfs, error) {
	opts := append([]remote.Option{
		remote.WithContext(pctx),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
	}, s.Remote...)
	desc, err := remote.Get(nref, opts...)
	if err != nil {
		return Rootfs{}, &NotFoundError{Ref: ref, Unreachable: !isRegistryAnswer(err), Err: err}
	}
	if desc.MediaType.IsImage() {
		if r, ok := s.Lookup(desc.Digest.String()); ok {
			r.Ref = ref
			return r, s.remember(nref, r.Digest)
		}
	}
	opts[0] = remote.WithContext(ctx)
	img, err := remote.Image(nref, opts...)
	if err != nil {
		return Rootfs{}, &NotFoundError{Ref: ref, Unreachable: !isRegistryAnswer(err), Err: err}
	}
	r, err := s.unpackImage(ctx, img, ref)
	if err != nil {
		return Rootfs{}, fmt.Errorf("image %s: %w", ref, err)
	}
	if err := s.remember(nref, r.Digest); err != nil {
		return Rootfs{}, err
	}
	return r, nil
}

// unpackImage returns the cached rootfs of img's digest, unpacking it first
// on a miss.
func (s *Store) unpackImage(ctx context.Context, img v1.Image, ref string) (Rootfs, error) {
	d, err := img.Digest()
	if err != nil {
		return Rootfs{}, err
	}
	digest := d.String()
	if r, ok := s.Lookup(digest); ok {
		r.Ref = ref
		return r, nil
	}
	layers, err := img.Layers()
	if err != nil {
		return Rootfs{}, err
	}
	err = s.commit(digest, func(dir string) error {
		return applyLayers(ctx, dir, layers)
	})
	if err != nil {
		return Rootfs{}, err
	}
	r, _ := s.Lookup(digest)
	r.Ref = ref
	return r, nil
}

// commit fills a fresh temporary directory with fill and renames it to the
// rootfs directory of digest. If another writer got there first, its
// directory stands and ours is removed.
func (s *Store) commit(digest string, fill func(dir string) error) error {
	final := s.rootfsDir(digest)
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(s.Root, "tmp"), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.Root, "tmp"), "rootfs-")
	if err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		removeTree(tmp)
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		removeTree(tmp)
		if fi, serr := os.Stat(final); serr == nil && fi.IsDir() {
			return nil
		}
		return err
	}
	return nil
}

// removeTree removes dir even when unpacking left read-only directories in it.
func removeTree(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(dir)
}

func (s *Store) rootfsDir(digest string) string {
	return filepath.Join(s.Root, "rootfs", strings.ReplaceAll(digest, ":", "-"))
}

func (s *Store) refFile(nref name.Reference) string {
	return filepath.Join(s.Root, "refs", url.PathEscape(nref.Name()))
}

// remember records that nref resolved to digest.
func (s *Store) remember(nref name.Reference, digest string) error {
	f := s.refFile(nref)
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		return err
	}
	tmp := f + ".tmp" + fmt.Sprint(os.Getpid())
	if err := os.WriteFile(tmp, []byte(digest+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f)
}

// cached returns the rootfs ref last resolved to, if it is still cached.
func (s *Store) cached(ref string, nref name.Reference) (Rootfs, bool) {
	b, err := os.ReadFile(s.refFile(nref))
	if err != nil {
		return Rootfs{}, false
	}
	r, ok := s.Lookup(strings.TrimSpace(string(b)))
	r.Ref = ref
	return r, ok
}

// parseRef parses ref, allowing plain HTTP when its registry is on loopback.
func parseRef(ref string) (name.Reference, error) {
	nref, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image: bad reference %q: %w", ref, err)
	}
	if isLoopback(nref.Context().RegistryStr()) {
		return name.ParseReference(ref, name.Insecure)
	}
	return nref, nil
}

func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// isRegistryAnswer tells a registry's "no such image" (or "no access") from
// not reaching it.
func isRegistryAnswer(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode == http.StatusNotFound || te.StatusCode == http.StatusUnauthorized ||
			te.StatusCode == http.StatusForbidden
	}
	return false
}

func fromLayout(dir string) (v1.Image, string, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, "", err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	for _, d := range m.Manifests {
		if !d.MediaType.IsImage() {
			continue
		}
		if d.Platform != nil && (d.Platform.OS != "linux" || d.Platform.Architecture != runtime.GOARCH) {
			continue
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, "", err
		}
		return img, d.Annotations["org.opencontainers.image.ref.name"], nil
	}
	return nil, "", fmt.Errorf("no linux/%s image in the layout", runtime.GOARCH)
}

func fromTarball(path string) (v1.Image, string, error) {
	mf, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return nil, "", err
	}
	if len(mf) == 0 {
		return nil, "", errors.New("empty tarball manifest")
	}
	var tag *name.Tag
	ref := ""
	if len(mf[0].RepoTags) > 0 {
		ref = mf[0].RepoTags[0]
		t, err := name.NewTag(ref)
		if err != nil {
			return nil, "", err
		}
		tag = &t
	}
	img, err := tarball.ImageFromPath(path, tag)
	return img, ref, err
}
