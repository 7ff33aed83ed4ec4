// Package docs_test runs the Go snippets of the pages beside it.
package docs_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	goredis "github.com/redis/go-redis/v9"

	"github.com/ratesync/ratesync/internal/testenv"
	"github.com/ratesync/ratesync/middleware"
	"github.com/ratesync/ratesync/namespace"
	"github.com/ratesync/ratesync/ratelimiting"
	"github.com/ratesync/ratesync/strategy/memory"
	"github.com/ratesync/ratesync/strategy/postgres"
	"github.com/ratesync/ratesync/strategy/redis"
)

// The Go snippets of the pages of docs/ are parts of the tests of this
// file: a page marks each with <!-- readme-test: go NAME -->, NAME a test
// here whose body holds the snippet's statements as shown (and this file's
// imports the snippet's imports). TestDocsGoSnippets checks that; the tests
// run the snippets, against real Redis and PostgreSQL servers where they
// name stores.

func TestMain(m *testing.M) { testenv.Main(m) }

// docsInstance returns a local-only instance with a namespace "api" of the
// window sizes given, closed when the test ends.
func docsInstance(t *testing.T, sizes ...time.Duration) (context.Context, *ratelimiting.Instance) {
	ctx := context.Background()
	in := ratelimiting.NewInstance("docs")
	t.Cleanup(func() { _ = in.Close(ctx) })
	if err := in.New(namespace.Config{Name: "api", SyncRate: namespace.LocalOnly, WindowSizes: sizes}); err != nil {
		t.Fatal(err)
	}
	return ctx, in
}

// docs/library.md, Algorithms: every limit is one a namespace takes.
func TestDocsLimits(t *testing.T) {
	ctx, in := docsInstance(t, time.Second, time.Minute, 10*time.Minute)
	limits := []ratelimiting.Limit{
		{Limit: 100, Window: time.Minute},                                     // SlidingWindow
		{Limit: 10, Window: time.Second, Algorithm: ratelimiting.FixedWindow}, // or Fixed: true
		{Limit: 10, Window: time.Minute, Algorithm: ratelimiting.TokenBucket, Burst: 20},
		{Limit: 2, Window: time.Second, Algorithm: ratelimiting.LeakyBucket, Burst: 4},
		{Limit: 5, Window: 15 * time.Minute, Algorithm: ratelimiting.SlidingLog},
		{Limit: 1000, Window: 24 * time.Hour, Algorithm: ratelimiting.AnchoredWindow},
		{Limit: 600, Window: time.Hour, Precision: 10 * time.Minute}, // SlidingWindow over 6 sub-windows
	}
	for _, l := range limits {
		if st, err := in.AllowOne(ctx, "api", "user:42", 1, l); err != nil || !st.Allowed {
			t.Errorf("%+v: %+v, %v", l, st, err)
		}
	}
}

// docs/library.md, Namespaces and their configuration.
func TestDocsNamespaceConfig(t *testing.T) {
	in := ratelimiting.NewInstance("docs")
	defer in.Close(context.Background())
	store := memory.New()
	cfg := namespace.Config{
		Name:         "api",                                     // "default" when empty; no '|'; valid UTF-8
		Dict:         "default",                                 // the dict the counters live in; namespaces may share one
		SyncRate:     time.Second,                               // > 0 periodic, 0 synchronous, < 0 local only
		Strategy:     store,                                     // required unless SyncRate < 0
		WindowSizes:  []time.Duration{time.Second, time.Minute}, // whole ms, > 0; duplicates kept once
		DictCapacity: 1_000_000,                                 // bound on the dict's counters (about 100 bytes each)
		NearLimit:    false,                                     // periodic: decide near-limit keys in the store (below)
		Clock:        namespace.StoreClock,                      // count windows in the store's time (default); NodeClock: the node's
	}
	if err := in.New(cfg); err != nil {
		t.Fatal(err)
	}
}

// docs/library.md, Pointing a namespace at Redis or PostgreSQL: a
// periodic namespace on Redis and a synchronous one on PostgreSQL, which
// then decide.
func TestDocsStores(t *testing.T) {
	ctx := context.Background()
	in := ratelimiting.NewInstance("docs")
	defer in.Close(ctx)
	redisAddr, postgresURL := testenv.NewRedis(t).Addr, testenv.NewPostgres(t).URL
	err := func() error {
		// Redis: any go-redis UniversalClient (standalone, Sentinel, Cluster).
		rstore, err := redis.New(goredis.NewClient(&goredis.Options{Addr: redisAddr}), redis.Config{})
		if err != nil {
			return err
		}

		// PostgreSQL (postgresURL: postgres://user:password@host:5432/db): creates or
		// migrates its schema, safe when several nodes start at once, or, when the
		// server cannot be reached, leaves that to the first call that reaches it.
		pool, err := pgxpool.New(ctx, postgresURL)
		if err != nil {
			return err
		}
		pstore, err := postgres.New(ctx, pool, postgres.Config{})
		if err != nil {
			return err
		}

		err = in.New(namespace.Config{Name: "api", SyncRate: time.Second, Strategy: rstore,
			WindowSizes: []time.Duration{time.Second, time.Minute}})
		if err != nil {
			return err
		}
		return in.New(namespace.Config{Name: "billing", SyncRate: namespace.Synchronous, Strategy: pstore,
			WindowSizes: []time.Duration{time.Minute, time.Hour}})
	}()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"api", "billing"} {
		d, err := in.Allow(ctx, ns, "user:42", 1, ratelimiting.Limit{Limit: 10, Window: time.Minute})
		if err != nil || !d.Allowed {
			t.Errorf("%s: %+v, %v", ns, d, err)
		}
	}
}

// docs/library.md, HTTP middleware.
func TestDocsMiddleware(t *testing.T) {
	_, instance := docsInstance(t, time.Second, time.Minute)
	mux := http.NewServeMux()
	apiHandler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	err := func() error {
		key, err := middleware.ParseKey([]string{"header:X-Api-Key"}, middleware.KeyOptions{})
		if err != nil {
			return err
		}
		lim, err := middleware.New(instance, middleware.Policy{
			Name: "api", Namespace: "api",
			Limits: []ratelimiting.Limit{{Limit: 10, Window: time.Second, Fixed: true}, {Limit: 100, Window: time.Minute}},
			Key:    key,
		}, middleware.Options{})
		if err != nil {
			return err
		}
		mux.Handle("/api/", lim.Handler(apiHandler))
		return nil
	}()
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/api/items", nil)
	r.Header.Set("X-Api-Key", "alice")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "9" {
		t.Errorf("%d %v", w.Code, w.Header())
	}
}

// TestDocsGoSnippets checks that each marked Go snippet of docs/ is in the
// test it names, as shown.
func TestDocsGoSnippets(t *testing.T) {
	const file = "docs_test.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	text := func(n ast.Node) string {
		return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	bodies := map[string]string{} // a test's body, one tab less
	var imports []string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			if d.Tok == token.IMPORT {
				for _, l := range strings.Split(text(d), "\n") {
					imports = append(imports, strings.TrimSpace(l))
				}
			}
		case *ast.FuncDecl:
			if strings.HasPrefix(d.Name.Name, "TestDocs") {
				bodies[d.Name.Name] = "\n" + strings.TrimSuffix(strings.TrimPrefix(text(d.Body), "{\n"), "}")
			}
		}
	}
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	const mark = "<!-- readme-test: go "
	found := 0
	for _, page := range pages {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		rest := string(data)
		for {
			_, after, ok := strings.Cut(rest, mark)
			if !ok {
				break
			}
			name, after, _ := strings.Cut(after, " -->\n```go\n")
			snippet, after, ok := strings.Cut(after, "\n```\n")
			if !ok {
				t.Fatalf("%s: %s%s -->: want a ```go block after it", page, mark, name)
			}
			rest = after
			found++
			body, ok := bodies[name]
			if !ok {
				t.Errorf("%s: the snippet names %s, which %s lacks", page, name, file)
				continue
			}
			if strings.HasPrefix(snippet, "import (\n") {
				decl, code, _ := strings.Cut(snippet, "\n)\n")
				for _, l := range strings.Split(decl, "\n")[1:] {
					if l = strings.TrimSpace(l); l != "" && !slices.Contains(imports, l) {
						t.Errorf("%s: %s's import %s is not among %s's", page, name, l, file)
					}
				}
				snippet = strings.TrimPrefix(code, "\n")
			}
			// The snippet's lines, each indented as deep as the first is in
			// the body (one tab in the test, two in a closure).
			in := func(indent string) bool {
				lines := strings.Split(snippet, "\n")
				for i, l := range lines {
					if l != "" {
						lines[i] = indent + l
					}
				}
				return strings.Contains(body, "\n"+strings.Join(lines, "\n")+"\n")
			}
			if !in("\t") && !in("\t\t") {
				t.Errorf("%s: the snippet of %s is not in its body as shown.\nThe page shows:\n%s\n\n%s has:%s", page, name, snippet, name, body)
			}
		}
	}
	delete(bodies, "TestDocsGoSnippets") // the tests that run no snippet
	delete(bodies, "TestDocsReferences")
	if found < len(bodies) {
		t.Errorf("%d marked snippets in the pages, for %d tests", found, len(bodies))
	}
}

// TestDocsReferences checks the references that code comments and pages
// make to BENCHMARKS.md's numbered sections ("BENCHMARKS.md, section 12",
// "BENCHMARKS.md §10.1", "sections 10.2 and 10.3") and to the headings of
// these pages ("docs/guarantees.md, "Clocks""): each names one that exists.
func TestDocsReferences(t *testing.T) {
	bench, err := os.ReadFile("../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ ([0-9]+(?:\.[0-9]+)?)\.? `).FindAllStringSubmatch(string(bench), -1) {
		sections[m[1]] = true
	}
	benchRef := regexp.MustCompile(`BENCHMARKS\.md\]?(?:\([^)]*\))?,?\s*(?:sections?|§)\s*([0-9]+(?:\.[0-9]+)?)(?:\s*(?:and|,|to)\s*([0-9]+(?:\.[0-9]+)?))?`)
	pageRef := regexp.MustCompile(`docs/([a-z-]+\.md),\s*"([^"]+)"`)
	comment := regexp.MustCompile(`(?m)^\s*//\s?(.*)$`)
	var files []string
	err = filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != ".." {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".md") && !strings.HasSuffix(p, "BENCHMARKS.md") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(data)
		if strings.HasSuffix(f, ".go") { // its comments, lines joined
			var b strings.Builder
			for _, m := range comment.FindAllStringSubmatch(text, -1) {
				b.WriteString(m[1] + " ")
			}
			text = b.String()
		}
		text = strings.Join(strings.Fields(text), " ")
		for _, m := range benchRef.FindAllStringSubmatch(text, -1) {
			for _, n := range m[1:] {
				if n == "" {
					continue
				}
				refs++
				if !sections[n] {
					t.Errorf("%s: %q: BENCHMARKS.md has no section %s", f, m[0], n)
				}
			}
		}
		for _, m := range pageRef.FindAllStringSubmatch(text, -1) {
			refs++
			page, err := os.ReadFile(m[1])
			if err != nil {
				t.Errorf("%s: %q: %v", f, m[0], err)
				continue
			}
			if !regexp.MustCompile(`(?mi)^#+ ` + regexp.QuoteMeta(m[2]) + `$`).Match(page) {
				t.Errorf("%s: %q: %s has no heading %q", f, m[0], m[1], m[2])
			}
		}
	}
	if refs == 0 {
		t.Error("no references found: the patterns are wrong")
	}
}
