package serve

import (
	"net"
	"strings"
	"testing"
)

// Each step is one event: "a<s1" opens a from source s1 (nothing given
// up), "b<s1=a" opens b, which takes a's place, "c<s1!" is refused, "+a"
// is a's full request (then serving it), "~a" a's request ended long
// enough ago (idle), "-a" closes a.
func TestLedger_AdmitGivesUpTheOldestPendingConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		caps  caps
		steps []string
		open  int
		pend  int
	}{
		{"under the caps nothing gives way", caps{4, 2}, []string{"a<s1", "b<s2", "c<s1"}, 3, 3},
		{"a source at its cap gives up its oldest pending", caps{10, 2}, []string{"a<s1", "b<s1", "c<s1=a", "d<s1=b"}, 2, 2},
		{"a source at its cap keeps what has sent a full request", caps{10, 3}, []string{"a<s1", "b<s1", "+a", "c<s1", "d<s1=b", "e<s1=c"}, 3, 2},
		{"another source's pending connections are not given up for a source at its cap", caps{10, 1}, []string{"a<s2", "b<s1", "+b", "c<s1!"}, 2, 1},
		{"a source whose connections all sent full requests refuses a newcomer", caps{10, 2}, []string{"a<s1", "b<s1", "+a", "+b", "c<s1!"}, 2, 0},
		{"a full budget gives up the oldest pending of any source", caps{3, -1}, []string{"a<s1", "b<s2", "c<s3", "+a", "d<s4=b", "e<s1=c"}, 3, 2},
		{"a full budget of full requests refuses", caps{2, -1}, []string{"a<s1", "b<s2", "+a", "+b", "c<s3!"}, 2, 0},
		{"a closed connection frees its place", caps{2, 1}, []string{"a<s1", "+a", "b<s1!", "-a", "b<s1"}, 1, 1},
		{"a victim's own close is a no-op", caps{10, 1}, []string{"a<s1", "b<s1=a", "-a", "c<s1=b"}, 1, 1},
		{"a full request after being given up is a no-op", caps{10, 1}, []string{"a<s1", "b<s1=a", "+a", "c<s1=b"}, 1, 1},
		{"no caps", caps{-1, -1}, []string{"a<s1", "b<s1", "c<s1", "+b"}, 3, 2},
		{"the source cap applies before the budget's", caps{2, 1}, []string{"a<s1", "b<s2", "c<s1=a", "-b", "+c", "d<s2", "e<s3=d"}, 2, 1},
		{"a full budget with nothing pending gives up an idle connection", caps{3, 1}, []string{"a<s1", "b<s2", "c<s3", "+a", "+b", "+c", "~b", "d<s4=b"}, 3, 1},
		{"a full budget gives up a pending connection before an idle one", caps{2, -1}, []string{"a<s1", "b<s2", "+a", "~a", "c<s3=b"}, 2, 1},
		{"a full budget never gives up a connection serving a request", caps{2, -1}, []string{"a<s1", "b<s2", "+a", "+b", "c<s3!"}, 2, 0},
		{"a source at its cap keeps its idle connections", caps{10, 1}, []string{"a<s1", "+a", "~a", "b<s1!"}, 1, 0},
		{"an idle connection given up is forgotten", caps{2, -1}, []string{"a<s1", "b<s2", "+a", "+b", "~a", "~b", "c<s3=a", "+c", "d<s4=b", "+d", "e<s5!"}, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l ledger
			named := map[string]*entry{}
			name := map[*entry]string{}
			idle := map[*entry]bool{}
			for _, st := range tc.steps {
				switch st[0] {
				case '+':
					l.complete(named[st[1:]])
					continue
				case '~':
					idle[named[st[1:]]] = true
					continue
				case '-':
					l.drop(named[st[1:]])
					continue
				}
				id, rest, _ := strings.Cut(st, "<")
				src, want, _ := strings.Cut(rest, "=")
				refuse := strings.HasSuffix(src, "!")
				src = strings.TrimSuffix(src, "!")
				e, victim, ok := l.admit(src, tc.caps, func(e *entry) bool { return idle[e] })
				if ok == refuse {
					t.Fatalf("%s: admitted %v, want %v", st, ok, !refuse)
				}
				if got := name[victim]; got != want {
					t.Fatalf("%s: gave up %q, want %q", st, got, want)
				}
				if ok {
					named[id], name[e] = e, id
				}
			}
			if l.open != tc.open || l.pending.Len() != tc.pend {
				t.Fatalf("open %d pending %d, want %d %d", l.open, l.pending.Len(), tc.open, tc.pend)
			}
			if l.pending.Len()+l.settled.Len() != l.open {
				t.Fatalf("pending %d + settled %d, open %d", l.pending.Len(), l.settled.Len(), l.open)
			}
			n := 0
			for _, s := range l.sources {
				n += s.open
				if s.open <= 0 {
					t.Fatalf("a source with %d open connections is kept", s.open)
				}
			}
			if n != l.open {
				t.Fatalf("sources hold %d, ledger %d", n, l.open)
			}
		})
	}
}

func TestSource_CountsIPv4AddressesAndIPv6Slash64s(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:5", "127.0.0.1"},
		{"[::ffff:10.0.0.1]:5", "10.0.0.1"},
		{"[2001:db8:1:2:3:4:5:6]:5", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::1]:7", "2001:db8:1:2::/64"},
	} {
		a, err := net.ResolveTCPAddr("tcp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := source(a); got != tc.want {
			t.Errorf("source(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
	if got := source(&net.UnixAddr{Name: "/x", Net: "unix"}); got != "" {
		t.Errorf("unix: %q", got)
	}
}
