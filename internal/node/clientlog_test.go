package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/tracelog"
)

// pgx's lines keep the failure and leave the statement and its arguments
// (keys, whole batches) out; a statement its caller canceled is DEBUG.
func TestPgxLinesLeaveStatementsOut(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx := context.Background()
	pgxLog(ctx, log, tracelog.LogLevelError, "Query", map[string]any{
		"sql": "SELECT $1", "args": []any{"user:42"}, "err": errors.New("boom"), "duration": 1500 * time.Microsecond, "pid": uint32(7)})
	pgxLog(ctx, log, tracelog.LogLevelError, "Query", map[string]any{"sql": "SELECT 1", "err": fmt.Errorf("wrapped: %w", context.Canceled)})
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first, second map[string]any
	if json.Unmarshal([]byte(lines[0]), &first) != nil || json.Unmarshal([]byte(lines[1]), &second) != nil {
		t.Fatalf("not JSON lines:\n%s", buf.String())
	}
	if first["level"] != "WARN" || first["msg"] != "postgres client: query failed" || first["err"] != "boom" ||
		first["duration"] != "1.5ms" || first["pid"] != 7.0 || strings.Contains(lines[0], "SELECT") || strings.Contains(lines[0], "user:42") {
		t.Errorf("line %s", lines[0])
	}
	if second["level"] != "DEBUG" || strings.Contains(lines[1], "SELECT") {
		t.Errorf("a canceled statement: %s", lines[1])
	}
}
