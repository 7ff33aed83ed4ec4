package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/ratesync/ratesync/internal/node/config"
)

// admin guards an admin endpoint. With node.admin_token set, the request
// needs "Authorization: Bearer <token>" (compared in constant time). Without
// one, admin endpoints answer only on a loopback listener; on any other
// they are refused (403), so that no one on the network can drive the node.
func (n *Node) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		token := n.state().cfg.Node.AdminToken
		if token == "" {
			if !n.adminOpen.Load() {
				writeProblem(w, &problem{Type: probForbidden, Title: "Admin endpoints disabled", Status: http.StatusForbidden,
					Detail: "the node listens beyond loopback and has no admin token: set node.admin_token or " + config.EnvAdminToken})
				return
			}
			h(w, r)
			return
		}
		if !tokenMatches(r.Header.Get("Authorization"), token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ratesync"`)
			writeProblem(w, &problem{Type: probUnauth, Title: "Unauthorized", Status: http.StatusUnauthorized,
				Detail: "admin endpoint: send Authorization: Bearer <admin token>"})
			return
		}
		h(w, r)
	}
}

// tokenMatches reports whether an Authorization header carries the bearer
// token. The comparison takes the same time whatever the header holds:
// both sides are hashed to equal lengths first.
func tokenMatches(authorization, token string) bool {
	scheme, got, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		got = ""
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1 && ok
}
