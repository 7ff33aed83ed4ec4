package redis

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"

	goredis "github.com/redis/go-redis/v9"
)

// The scripts share their prelude, lane.lua: each script sent is the
// prelude followed by its body, so that each runs alone (one EVALSHA, one
// Cluster slot per group) while the lane logic is written once.
var (
	//go:embed lane.lua
	laneSource string

	//go:embed push.lua
	pushBody string

	//go:embed check.lua
	checkBody string
)

// script is a Lua script run by its SHA1 digest (EVALSHA).
type script struct {
	name string
	src  string
	sha  string
}

func newScript(name, src string) *script {
	sum := sha1.Sum([]byte(src))
	return &script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

var (
	pushScript  = newScript("push.lua", laneSource+pushBody)
	checkScript = newScript("check.lua", laneSource+checkBody)
	scripts     = []*script{pushScript, checkScript}
)

// loadScripts loads every script into the server's script cache: on a
// Cluster client, into every node's (go-redis runs SCRIPT LOAD on each).
func (s *Store) loadScripts(ctx context.Context) error {
	for _, sc := range scripts {
		sha, err := s.c.ScriptLoad(ctx, sc.src).Result()
		if err != nil {
			return fmt.Errorf("redis: SCRIPT LOAD %s: %w", sc.name, err)
		}
		if sha != sc.sha {
			return fmt.Errorf("redis: SCRIPT LOAD %s: server digest %s, want %s", sc.name, sha, sc.sha)
		}
	}
	return nil
}

// isNoScript reports whether err is the server's NOSCRIPT reply: its script
// cache lost the script (a restart, a failover, SCRIPT FLUSH).
func isNoScript(err error) bool { return goredis.HasErrorPrefix(err, "NOSCRIPT") }
