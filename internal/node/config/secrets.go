package config

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Masked returns c with its secrets masked: what the node logs at start and
// GET /v1/namespaces shows.
func (c Config) Masked() Config {
	if c.Node.AdminToken != "" {
		c.Node.AdminToken = "xxxxx"
	}
	if c.Policies == nil {
		c.Policies = []PolicyConfig{}
	}
	c.Namespaces = slices.Clone(c.Namespaces)
	for i := range c.Namespaces {
		c.Namespaces[i].URL = MaskURL(c.Namespaces[i].URL)
	}
	if c.Gateway != nil {
		g := *c.Gateway
		g.Upstream = MaskURL(g.Upstream)
		c.Gateway = &g
	}
	if c.RLS != nil {
		r := *c.RLS
		r.URL = MaskURL(r.URL)
		c.RLS = &r
	}
	return c
}

var (
	dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	// userPassword is the password of a URL that net/url cannot parse
	// (a bad port, say): scheme://user:password@
	userPassword = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:([^/@]*)@`)
)

// userInfoEnd returns the index of the '@' that ends the user info of s,
// a URL that does not parse, and the bounds of its password (-1 when s
// has no '@'; p0 < 0 when the password is not a scheme://user:password@
// one ending at that last '@').
func userInfoEnd(s string) (at, p0, p1 int) {
	at, p0, p1 = strings.LastIndexByte(s, '@'), -1, -1
	if m := userPassword.FindStringSubmatchIndex(s); m != nil && at >= 0 && m[1] == at+1 {
		p0, p1 = m[2], m[3]
	}
	return at, p0, p1
}

// parseStoreURL parses s when it has the shape of a URL with an
// authority, scheme://[user[:password]@]host..., with no '@' after it;
// what does not parse into that shape may hide a password anywhere before
// its last '@' (//u:pw@h, redis:/u:pw@h, u:pw@h:6379).
func parseStoreURL(s string) (*url.URL, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Opaque != "" || !strings.HasPrefix(s[len(u.Scheme)+1:], "//") {
		return nil, false
	}
	if strings.Contains(u.Host, "@") || strings.Contains(u.Path, "@") || strings.Contains(u.Fragment, "@") {
		return nil, false
	}
	return u, true
}

// MaskURL hides the password of a store URL: the user info's, a
// password= query parameter's, or a key=value DSN's. Of a string that is
// not a URL of the expected shape, everything before the last '@' is
// hidden.
func MaskURL(s string) string {
	if s == "" {
		return ""
	}
	u, ok := parseStoreURL(s)
	if !ok {
		s = dsnPassword.ReplaceAllString(s, "${1}xxxxx")
		switch at, p0, p1 := userInfoEnd(s); {
		case p0 >= 0:
			s = s[:p0] + "xxxxx" + s[p1:]
		case at >= 0:
			s = "xxxxx" + s[at:]
		}
		return s
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if q := u.Query(); len(q) > 0 {
		changed := false
		for k := range q {
			if secretParam(k) {
				q.Set(k, "xxxxx")
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

// secretParam reports whether a URL query parameter holds a secret.
func secretParam(k string) bool {
	lk := strings.ToLower(k)
	return strings.Contains(lk, "pass") || strings.Contains(lk, "secret") || strings.Contains(lk, "token")
}

// Secrets returns the secret strings of c: admin token, store passwords.
func (c Config) Secrets() []string {
	var out []string
	add := func(s string) {
		if s != "" && s != "xxxxx" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(c.Node.AdminToken)
	for _, ns := range c.Namespaces {
		for _, s := range urlSecrets(ns.URL) {
			add(s)
		}
	}
	if c.Gateway != nil {
		for _, s := range urlSecrets(c.Gateway.Upstream) {
			add(s)
		}
	}
	return out
}

// urlSecrets returns the passwords a store URL carries. Of a string that
// is not a URL of the expected shape, what comes before its last '@' is a
// secret, and so is the part of it after its last ':'.
func urlSecrets(s string) []string {
	var out []string
	u, ok := parseStoreURL(s)
	if !ok {
		switch at, p0, p1 := userInfoEnd(s); {
		case p0 >= 0:
			out = append(out, s[p0:p1])
		case at > 0:
			out = append(out, s[:at])
			if j := strings.LastIndexByte(s[:at], ':'); j >= 0 && j+1 < at {
				out = append(out, s[j+1:at])
			}
		}
		for _, m := range dsnPassword.FindAllStringSubmatch(s, -1) {
			out = append(out, strings.Trim(m[2], "'"))
		}
		return out
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			out = append(out, p)
			if e := url.QueryEscape(p); e != p {
				out = append(out, e)
			}
		}
	}
	for k, vs := range u.Query() {
		if secretParam(k) {
			out = append(out, vs...)
		}
	}
	return out
}

// MaskSecrets replaces every secret of the url in s.
func MaskSecrets(s, storeURL string) string {
	for _, p := range urlSecrets(storeURL) {
		if p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}
