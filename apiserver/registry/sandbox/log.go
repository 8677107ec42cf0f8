package sandboxstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/agentapi"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/sandbox"
)

// logStorage serves GET .../sandboxes/{name}/log, as pods/log does: the
// sandbox's log (its agent's, through its node) as text/plain, one line
// per entry (agentapi.LogEntry.Line), selected by SandboxLogOptions —
// tailLines, sinceSeconds or sinceTime, limitBytes, timestamps — and
// follow, which streams it as pods/log does (logFollow): the selected
// lines, then each entry as the agent writes it, flushed line by line,
// until the client goes away or the node ends it (the sandbox paused or
// released). A follow is a long-running request (LongRunning: no request
// timeout); its node bounds how many run at once (429). RBAC: get on
// sandboxes/log.
type logStorage struct {
	s *sandboxStorage
}

var (
	_ rest.GetterWithOptions = (*logStorage)(nil)
	_ rest.StorageMetadata   = (*logStorage)(nil)
)

func (l *logStorage) New() runtime.Object { return &sandboxv1beta1.Sandbox{} }
func (l *logStorage) Destroy()            {}

// ProducesMIMETypes and ProducesObject describe the text answer in the
// OpenAPI, as pods/log's.
func (l *logStorage) ProducesMIMETypes(verb string) []string {
	return []string{"text/plain"}
}
func (l *logStorage) ProducesObject(verb string) interface{} { return "" }

func (l *logStorage) NewGetOptions() (runtime.Object, bool, string) {
	return &sandbox.SandboxLogOptions{}, false, ""
}

func (l *logStorage) Get(ctx context.Context, name string, opts runtime.Object) (runtime.Object, error) {
	o, ok := opts.(*sandbox.SandboxLogOptions)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("log takes SandboxLogOptions, not %T", opts))
	}
	q, err := logsQuery(o, l.s.now())
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	sb, err := l.s.fleet.ByRef(ctx, refOf(ctx, name))
	if err != nil {
		return nil, fleetError(err, name, "log")
	}
	if o.Follow {
		if o.TailLines != nil && *o.TailLines == 0 {
			// None of the entries there are (the agent's tail 0 is all):
			// only what comes.
			q.Since, q.Tail = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 0
		}
		st, err := l.s.fleet.FollowLogs(ctx, sb, q)
		if err != nil {
			if fleet.HTTPStatus(err) == http.StatusBadGateway {
				return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("log of sandbox %s: %v", name, err))
			}
			return nil, fleetError(err, name, "log")
		}
		return &logFollow{st: st, timestamps: o.Timestamps, limit: o.LimitBytes}, nil
	}
	if o.TailLines != nil && *o.TailLines == 0 {
		return &logText{}, nil
	}
	logs, err := l.s.fleet.Logs(ctx, sb, q)
	if err != nil {
		if fleet.HTTPStatus(err) == http.StatusBadGateway {
			return nil, apierrors.NewServiceUnavailable(fmt.Sprintf("log of sandbox %s: %v", name, err))
		}
		return nil, fleetError(err, name, "log")
	}
	var b bytes.Buffer
	for _, e := range logs.Entries {
		if o.Timestamps {
			b.WriteString(e.Time.UTC().Format(time.RFC3339Nano))
			b.WriteByte(' ')
		}
		b.WriteString(e.Line())
		b.WriteByte('\n')
		if o.LimitBytes != nil && int64(b.Len()) >= *o.LimitBytes {
			b.Truncate(int(*o.LimitBytes))
			break
		}
	}
	return &logText{text: b.Bytes()}, nil
}

// logsQuery turns the options into the agent's query (400s for what
// pods/log also refuses).
func logsQuery(o *sandbox.SandboxLogOptions, now time.Time) (agentapi.LogsQuery, error) {
	var q agentapi.LogsQuery
	switch {
	case o.TailLines != nil && *o.TailLines < 0:
		return q, fmt.Errorf("tailLines must be >= 0, got %d", *o.TailLines)
	case o.LimitBytes != nil && *o.LimitBytes < 1:
		return q, fmt.Errorf("limitBytes must be >= 1, got %d", *o.LimitBytes)
	case o.SinceSeconds != nil && *o.SinceSeconds < 1:
		return q, fmt.Errorf("sinceSeconds must be >= 1, got %d", *o.SinceSeconds)
	case o.SinceSeconds != nil && o.SinceTime != nil:
		return q, fmt.Errorf("at most one of sinceTime or sinceSeconds may be specified")
	}
	if o.TailLines != nil && *o.TailLines > 0 {
		q.Tail = int(min(*o.TailLines, int64(agentapi.MaxLogBytes)))
	}
	if o.SinceSeconds != nil {
		q.Since = now.Add(-time.Duration(min(*o.SinceSeconds, int64(100*365*24*3600))) * time.Second)
	}
	if o.SinceTime != nil {
		q.Since = o.SinceTime.Time
	}
	return q, nil
}

// logText is the log's answer: a runtime.Object the API server streams
// as it is (rest.ResourceStreamer), text/plain.
type logText struct {
	text []byte
}

var _ rest.ResourceStreamer = (*logText)(nil)

func (t *logText) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (t *logText) DeepCopyObject() runtime.Object {
	return &logText{text: bytes.Clone(t.text)}
}

func (t *logText) InputStream(ctx context.Context, apiVersion, acceptHeader string) (io.ReadCloser, bool, string, error) {
	return io.NopCloser(bytes.NewReader(t.text)), false, "text/plain; charset=utf-8", nil
}

// logFollow is a followed log's answer: each entry's line
// (agentapi.LogEntry.Line, after its RFC 3339 time with timestamps) as it
// comes, flushed (rest.ResourceStreamer with flush), the first limit
// bytes at most.
type logFollow struct {
	st         *agentapi.LogStream
	timestamps bool
	limit      *int64
}

var _ rest.ResourceStreamer = (*logFollow)(nil)

func (f *logFollow) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (f *logFollow) DeepCopyObject() runtime.Object   { c := *f; return &c }

func (f *logFollow) InputStream(ctx context.Context, apiVersion, acceptHeader string) (io.ReadCloser, bool, string, error) {
	r := &followReader{f: f}
	if f.limit != nil {
		r.left = *f.limit
	}
	return r, true, "text/plain; charset=utf-8", nil
}

// followReader renders a followed log as text, one entry at a time.
type followReader struct {
	f    *logFollow
	buf  []byte
	left int64 // bytes the limit still allows (with f.limit)
}

func (r *followReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		if r.f.limit != nil && r.left <= 0 {
			return 0, io.EOF
		}
		e, err := r.f.st.Next()
		if err != nil {
			return 0, io.EOF // the node ended the stream, or it broke: the follow ends
		}
		if r.f.timestamps {
			r.buf = append(r.buf, e.Time.UTC().Format(time.RFC3339Nano)...)
			r.buf = append(r.buf, ' ')
		}
		r.buf = append(r.buf, e.Line()...)
		r.buf = append(r.buf, '\n')
		if r.f.limit != nil {
			if int64(len(r.buf)) > r.left {
				r.buf = r.buf[:r.left]
			}
			r.left -= int64(len(r.buf))
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func (r *followReader) Close() error { return r.f.st.Close() }

// ParameterCodec is next, except that it decodes SandboxLogOptions (the
// log subresource's query) itself: next, metav1's, knows only the meta
// types.
func ParameterCodec(next runtime.ParameterCodec) runtime.ParameterCodec {
	return logCodec{next}
}

type logCodec struct{ runtime.ParameterCodec }

func (c logCodec) DecodeParameters(parameters url.Values, from schema.GroupVersion, into runtime.Object) error {
	if o, ok := into.(*sandbox.SandboxLogOptions); ok {
		if err := sandbox.DecodeLogOptions(parameters, o); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		return nil
	}
	return c.ParameterCodec.DecodeParameters(parameters, from, into)
}
