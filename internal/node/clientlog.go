package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/tracelog"
	goredis "github.com/redis/go-redis/v9"
)

// The store clients' own log lines go through the node's logger, so that
// every line the node writes has its format (one JSON object a line with
// log_format json) and its secrets masked.

// redisLog is the logger go-redis writes to: one for the process, as
// go-redis has one (redis.SetLogger). The node's start sets it. A line is
// written under the read lock, so that once setRedisLog(nil) returns no
// line of go-redis's follows.
var redisLog struct {
	sync.RWMutex
	log *slog.Logger
}

// redisLogger is go-redis's Logging on redisLog. go-redis gives its lines
// no level; they report failures (a dial that failed, a connection
// dropped), so they are warnings.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	redisLog.RLock()
	defer redisLog.RUnlock()
	if redisLog.log == nil {
		return
	}
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	msg = strings.TrimPrefix(msg, "redis: ")
	redisLog.log.WarnContext(ctx, "redis client: "+msg)
}

// routeRedisLog sends go-redis's log lines to log from now on.
func routeRedisLog(log *slog.Logger) {
	setRedisLog(log)
	goredis.SetLogger(redisLogger{})
}

// setRedisLog sets the logger of go-redis's lines (nil: none), once the
// lines being written are.
func setRedisLog(log *slog.Logger) {
	redisLog.Lock()
	redisLog.log = log
	redisLog.Unlock()
}

// pgxTracer returns the tracer of a PostgreSQL pool: pgx's own warnings and
// errors (a connection that failed, a statement that failed) at WARN on
// log, nothing per statement that succeeds. Each failure is also the
// error of the store call it ended, which the node reports where it
// handles it. Statements and their arguments (keys, long batches) stay
// out of the log.
func pgxTracer(log *slog.Logger) pgx.QueryTracer {
	return pgxTrace{&tracelog.TraceLog{
		Logger: tracelog.LoggerFunc(func(ctx context.Context, level tracelog.LogLevel, msg string, data map[string]any) {
			pgxLog(ctx, log, level, msg, data)
		}),
		LogLevel: tracelog.LogLevelWarn,
		Config:   &tracelog.TraceLogConfig{TimeKey: "duration"}, // "time" is the line's own
	}}
}

// pgxTrace is tracelog's tracer without its pool hooks: a connection that
// fails is logged once, by its connect, not again by each acquire that
// waited for it.
type pgxTrace struct{ tl *tracelog.TraceLog }

var (
	_ pgx.QueryTracer    = pgxTrace{}
	_ pgx.BatchTracer    = pgxTrace{}
	_ pgx.ConnectTracer  = pgxTrace{}
	_ pgx.PrepareTracer  = pgxTrace{}
	_ pgx.CopyFromTracer = pgxTrace{}
)

func (t pgxTrace) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return t.tl.TraceQueryStart(ctx, c, d)
}

func (t pgxTrace) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	t.tl.TraceQueryEnd(ctx, c, d)
}

func (t pgxTrace) TraceBatchStart(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	return t.tl.TraceBatchStart(ctx, c, d)
}

func (t pgxTrace) TraceBatchQuery(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.tl.TraceBatchQuery(ctx, c, d)
}

func (t pgxTrace) TraceBatchEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	t.tl.TraceBatchEnd(ctx, c, d)
}

func (t pgxTrace) TraceConnectStart(ctx context.Context, d pgx.TraceConnectStartData) context.Context {
	return t.tl.TraceConnectStart(ctx, d)
}

func (t pgxTrace) TraceConnectEnd(ctx context.Context, d pgx.TraceConnectEndData) {
	t.tl.TraceConnectEnd(ctx, d)
}

func (t pgxTrace) TracePrepareStart(ctx context.Context, c *pgx.Conn, d pgx.TracePrepareStartData) context.Context {
	return t.tl.TracePrepareStart(ctx, c, d)
}

func (t pgxTrace) TracePrepareEnd(ctx context.Context, c *pgx.Conn, d pgx.TracePrepareEndData) {
	t.tl.TracePrepareEnd(ctx, c, d)
}

func (t pgxTrace) TraceCopyFromStart(ctx context.Context, c *pgx.Conn, d pgx.TraceCopyFromStartData) context.Context {
	return t.tl.TraceCopyFromStart(ctx, c, d)
}

func (t pgxTrace) TraceCopyFromEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceCopyFromEndData) {
	t.tl.TraceCopyFromEnd(ctx, c, d)
}

// pgxLog writes one line of tracelog's on log: its failures at WARN (the
// store's caller gets the error too, and the node goes on), but for a
// statement its caller canceled, which says nothing of the server (DEBUG);
// without the statement's text and arguments.
func pgxLog(ctx context.Context, log *slog.Logger, level tracelog.LogLevel, msg string, data map[string]any) {
	lvl, what := slog.LevelWarn, " failed"
	if err, _ := data["err"].(error); level > tracelog.LogLevelWarn || errors.Is(err, context.Canceled) {
		lvl = slog.LevelDebug
	}
	if level > tracelog.LogLevelWarn {
		what = ""
	}
	attrs := make([]slog.Attr, 0, len(data))
	for _, k := range slices.Sorted(maps.Keys(data)) {
		switch v := data[k].(type) {
		case nil:
		case time.Duration:
			attrs = append(attrs, slog.String(k, v.String()))
		default:
			if k != "sql" && k != "args" {
				attrs = append(attrs, slog.Any(k, v))
			}
		}
	}
	log.LogAttrs(ctx, lvl, "postgres client: "+strings.ToLower(msg)+what, attrs...)
}
