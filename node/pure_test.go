package node

import (
	"flag"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

func k(t string) pool.Key { return pool.Key{Template: t, Net: "none", Size: "small"} }

func TestPlanBoots(t *testing.T) {
	cases := []struct {
		name  string
		pools []poolView
		free  int
		want  []pool.Key
	}{
		{"no slots", []poolView{{Key: k("a"), Target: 3, GoldenReady: true}}, 0, nil},
		{"fills up to deficit", []poolView{{Key: k("a"), Target: 3, Warm: 1, GoldenReady: true}}, 4, []pool.Key{k("a"), k("a")}},
		{"booting counts", []poolView{{Key: k("a"), Target: 3, Warm: 1, Booting: 2, GoldenReady: true}}, 4, nil},
		{"golden first: one boot", []poolView{{Key: k("a"), Target: 5}}, 4, []pool.Key{k("a")}},
		{"golden in flight: none", []poolView{{Key: k("a"), Target: 5, Booting: 1}}, 4, nil},
		{"blocked pool waits", []poolView{{Key: k("a"), Target: 5, GoldenReady: true, Blocked: true}}, 4, nil},
		{"round robin, largest deficit first", []poolView{
			{Key: k("a"), Target: 1, GoldenReady: true},
			{Key: k("b"), Target: 10, GoldenReady: true},
			{Key: k("c"), Target: 10, GoldenReady: true},
		}, 4, []pool.Key{k("b"), k("c"), k("a"), k("b")}},
		{"over target plans nothing", []poolView{{Key: k("a"), Target: 1, Warm: 3, GoldenReady: true}}, 4, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := planBoots(tc.pools, tc.free); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("planBoots = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSurplusAndDrained(t *testing.T) {
	if s := surplus(poolView{Target: 2, Warm: 5}); s != 3 {
		t.Fatalf("surplus = %d", s)
	}
	if s := surplus(poolView{Target: 5, Warm: 2}); s != 0 {
		t.Fatalf("surplus = %d", s)
	}
	if !drained(poolView{}) || drained(poolView{Booting: 1}) || drained(poolView{Target: 1}) {
		t.Fatal("drained")
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{0: 0, 1: 500 * time.Millisecond, 2: time.Second, 3: 2 * time.Second, 20: 30 * time.Second} {
		if got := backoff(n); got != want {
			t.Errorf("backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestParseClaim(t *testing.T) {
	cases := []struct {
		body   string
		status int // 0 = accepted
		key    pool.Key
	}{
		{`{"template":"img"}`, 0, pool.Key{Template: "img", Net: "none", Size: "small"}},
		{`{"template":"img","net":"egress","size":"large","ttl_seconds":60,"claim_ref":"ns/a"}`, 0, pool.Key{Template: "img", Net: "egress", Size: "large"}},
		{`{"template":"img","unknown":1}`, 0, pool.Key{Template: "img", Net: "none", Size: "small"}},
		{``, 400, pool.Key{}},
		{`{`, 400, pool.Key{}},
		{`[]`, 400, pool.Key{}},
		{`{"template":"img"} {}`, 400, pool.Key{}},
		{`{}`, 400, pool.Key{}},
		{`{"template":"img","net":"wifi"}`, 400, pool.Key{}},
		{`{"template":"img","size":"huge"}`, 400, pool.Key{}},
		{`{"template":"img","ttl_seconds":-1}`, 400, pool.Key{}},
		{`{"template":"img","ttl_seconds":"5"}`, 400, pool.Key{}},
		{`{"template":"img","claim_ref":"noslash"}`, 400, pool.Key{}},
		{`{"template":"img","claim_ref":"/x"}`, 400, pool.Key{}},
		{`{"template":"img","env":{"":"x"}}`, 400, pool.Key{}},
		// The claim rules (nodeapi.ClaimRequest.Validate), on receipt.
		{`{"template":"img","env":{"A\n":"x"}}`, 400, pool.Key{}},
		{`{"template":"img","env":{"A":"` + strings.Repeat("x", nodeapi.MaxEnvBytes) + `"}}`, 413, pool.Key{}},
		{`{"template":"img","labels":{"bad key!":"x"}}`, 400, pool.Key{}},
		{`{"template":"img","on_timeout":"sleep"}`, 400, pool.Key{}},
		{`{"template":"img","spec":[1]}`, 400, pool.Key{}},
		{`{"template":"img","metadata":{"":"x"}}`, 400, pool.Key{}},
	}
	for _, tc := range cases {
		in, err := parseClaim([]byte(tc.body))
		if tc.status == 0 {
			if err != nil || in.key != tc.key {
				t.Errorf("parseClaim(%s) = %+v, %v", tc.body, in, err)
			}
			continue
		}
		if statusOf(err) != tc.status {
			t.Errorf("parseClaim(%s) err = %v, want %d", tc.body, err, tc.status)
		}
	}
}

func TestParsePools(t *testing.T) {
	cases := []struct {
		body string
		ok   bool
		want []poolTarget
	}{
		{`{"pools":[]}`, true, []poolTarget{}},
		{`{"pools":[{"template":"a","warm":3},{"template":"a","net":"egress","warm":1}]}`, true,
			[]poolTarget{{"a", "none", "small", 3, nil}, {"a", "egress", "small", 1, nil}}},
		{`{"pools":[{"template":"a","net":"egress","warm":1,"egress":{"otherwise":"maybe"}}]}`, false, nil},         // an invalid pool policy
		{`{"pools":[{"template":"a","warm":1},{"template":"a","net":"none","size":"small","warm":2}]}`, false, nil}, // duplicate after normalization
		{`{"pools":[{"template":"a","warm":-1}]}`, false, nil},
		{`{"pools":[{"template":"a","net":"x","warm":1}]}`, false, nil},
		{`{"pools":[{"warm":1}]}`, false, nil},
		{`{}`, false, nil},
		{`{"pools":null}`, false, nil},
		{`nope`, false, nil},
	}
	for _, tc := range cases {
		got, err := parsePools([]byte(tc.body))
		if (err == nil) != tc.ok {
			t.Errorf("parsePools(%s) err = %v", tc.body, err)
			continue
		}
		if !tc.ok && statusOf(err) != http.StatusBadRequest {
			t.Errorf("parsePools(%s) status %d", tc.body, statusOf(err))
		}
		if tc.ok && !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parsePools(%s) = %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

func TestParseFork(t *testing.T) {
	for body, want := range map[string]int{``: 1, `{}`: 1, `{"count":0}`: 1, `{"count":16}`: 16, `{"count":17}`: -1, `{"count":-1}`: -1, `{"count":2,"ttl_seconds":-5}`: -1} {
		n, _, err := parseFork([]byte(body))
		if want < 0 {
			if statusOf(err) != http.StatusBadRequest {
				t.Errorf("parseFork(%s) err = %v", body, err)
			}
		} else if err != nil || n != want {
			t.Errorf("parseFork(%s) = %d, %v", body, n, err)
		}
	}
}

func TestTable(t *testing.T) {
	tab := newTable()
	if _, ok := tab.take(k("a")); ok {
		t.Fatal("took from a missing pool")
	}
	p := tab.pool(k("a"), true)
	p.warm = []vmm.Handle{{ID: "v1"}, {ID: "v2"}}
	h, ok := tab.take(k("a"))
	if !ok || h.ID != "v2" || len(p.warm) != 1 {
		t.Fatalf("take = %v %v", h, ok)
	}
	now := time.Now()
	a := &sandbox{rec: record{ID: "sb_a", ClaimRef: "ns/x", Handle: vmm.Handle{ID: "v2", Token: "ta"}, ClaimedAt: now, Deadline: now.Add(time.Minute)}}
	b := &sandbox{rec: record{ID: "sb_b", ClaimRef: "ns/x", Handle: vmm.Handle{ID: "v3", Token: "tb"}, ClaimedAt: now.Add(time.Second), Deadline: now}}
	tab.insert(a)
	tab.insert(b)
	if got := tab.ref("ns/x"); len(got) != 2 || got[0] != a || got[1] != b {
		t.Fatalf("ref = %v", got)
	}
	if tab.byToken[hashToken("tb")] != "sb_b" {
		t.Fatal("token index")
	}
	if got := tab.expired(now); !reflect.DeepEqual(got, []string{"sb_b"}) {
		t.Fatalf("expired = %v", got)
	}
	if !tab.vmIDs()["v2"] || tab.vmIDs()["v1"] {
		t.Fatal("vmIDs")
	}
	if tab.remove("sb_b") != b || tab.remove("sb_b") != nil {
		t.Fatal("remove")
	}
	if got := tab.ref("ns/x"); len(got) != 1 {
		t.Fatalf("ref after remove = %v", got)
	}
	if _, ok := tab.byToken[hashToken("tb")]; ok {
		t.Fatal("token index kept a removed sandbox")
	}
	tab.remove("sb_a")
	if len(tab.byRef) != 0 || len(tab.byToken) != 0 {
		t.Fatal("indexes not emptied")
	}
}

func TestNamespaceOf(t *testing.T) {
	for ref, want := range map[string]string{"ns/a": "ns", "": "default", "a": "default", "/a": "default"} {
		if got := namespaceOf(ref); got != want {
			t.Errorf("namespaceOf(%q) = %q", ref, got)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	good := NewOptions()
	good.NodeName = "n"
	if err := good.Complete(); err != nil || good.AdvertiseAddress != good.Listen {
		t.Fatalf("Complete: %v %+v", err, good)
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Options){
		"listen":      func(o *Options) { o.Listen = "nope" },
		"lease":       func(o *Options) { o.DefaultLease = 0 },
		"max < def":   func(o *Options) { o.MaxLease = time.Second },
		"concurrency": func(o *Options) { o.MaxBootConcurrency = 0 },
		"interval":    func(o *Options) { o.InventoryInterval = 0 },
		"data dir":    func(o *Options) { o.DataDir = "" },
		"write alone": func(o *Options) { o.WriteNodeToken = "/x" },
	} {
		o := *good
		mut(&o)
		if o.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	cfg := good.Config("node-tok", "tok")
	if cfg.Limits != DefaultLimits || cfg.RootToken != "tok" || cfg.NodeToken != "node-tok" || cfg.Name != "n" || cfg.MaxBootConcurrency != 4 {
		t.Fatalf("Config = %+v", cfg)
	}
}

func TestOptions_VMMOpt(t *testing.T) {
	o := NewOptions()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--vmm-opt", "accel=tcg", "--vmm-opt", "config=/a=b.json"}); err != nil {
		t.Fatal(err)
	}
	if o.VMMOptions["accel"] != "tcg" || o.VMMOptions["config"] != "/a=b.json" {
		t.Fatalf("VMMOptions = %v", o.VMMOptions)
	}
	if o.WarmCheckInterval != DefaultWarmCheckInterval {
		t.Fatalf("default --warm-check-interval = %v", o.WarmCheckInterval)
	}
	if err := fs.Parse([]string{"--warm-check-interval", "-1s"}); err != nil || o.Config("", "").WarmCheckInterval != -time.Second {
		t.Fatalf("--warm-check-interval: %v %v", err, o.Config("", "").WarmCheckInterval)
	}
	if err := fs.Parse([]string{"--vmm-opt", "novalue"}); err == nil {
		t.Fatal("a value without '=' must be rejected")
	}
}
