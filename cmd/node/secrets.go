package main

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
		c.Namespaces[i].URL = maskURL(c.Namespaces[i].URL)
	}
	if c.Gateway != nil {
		g := *c.Gateway
		g.Upstream = maskURL(g.Upstream)
		c.Gateway = &g
	}
	return c
}

var (
	dsnPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	// userPassword is the password of a URL that net/url cannot parse
	// (a bad port, say): scheme://user:password@
	userPassword = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:)([^/@]*)@`)
)

// maskURL hides the password of a store URL: the user info's, a
// password= query parameter's, or a key=value DSN's.
func maskURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" {
		s = userPassword.ReplaceAllString(s, "${1}xxxxx@")
		return dsnPassword.ReplaceAllString(s, "${1}xxxxx")
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
	}
	if q := u.Query(); len(q) > 0 {
		changed := false
		for k := range q {
			if lk := strings.ToLower(k); strings.Contains(lk, "pass") || strings.Contains(lk, "secret") || strings.Contains(lk, "token") {
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

// secretsOf returns the secret strings of c: admin token, store passwords.
func secretsOf(c Config) []string {
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

// urlSecrets returns the passwords a store URL carries.
func urlSecrets(s string) []string {
	var out []string
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if u.User != nil {
			if p, ok := u.User.Password(); ok {
				out = append(out, p)
				if e := url.QueryEscape(p); e != p {
					out = append(out, e)
				}
			}
		}
		for k, vs := range u.Query() {
			if lk := strings.ToLower(k); strings.Contains(lk, "pass") || strings.Contains(lk, "secret") || strings.Contains(lk, "token") {
				out = append(out, vs...)
			}
		}
		return out
	}
	if m := userPassword.FindStringSubmatch(s); m != nil {
		out = append(out, m[2])
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.Trim(m[2], "'"))
	}
	return out
}

// maskSecrets replaces every secret of the url in s.
func maskSecrets(s, storeURL string) string {
	for _, p := range urlSecrets(storeURL) {
		if p != "" {
			s = strings.ReplaceAll(s, p, "xxxxx")
		}
	}
	return s
}
