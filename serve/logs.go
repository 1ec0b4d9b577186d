package serve

// This file routes other packages' log lines into the server's logger:
// net/http's (ErrorLog) and go-redis's.

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"log/slog"
	"strings"
)

// ErrorLog returns a logger for http.Server.ErrorLog that writes into
// Config.Logger: a failed TLS handshake (which anyone who reaches the port
// can cause) at DEBUG, counted in subtta_tls_handshake_errors_total;
// anything else at WARN.
func (s *Server) ErrorLog() *log.Logger {
	return log.New(httpErrorWriter{s}, "", 0)
}

type httpErrorWriter struct{ s *Server }

func (w httpErrorWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, "\n"))
	if strings.Contains(msg, "TLS handshake error") {
		w.s.m.tlsFailures.Inc()
		w.s.log.Debug("serve: "+msg, "source", "net/http")
		return len(p), nil
	}
	w.s.log.Warn("serve: "+msg, "source", "net/http")
	return len(p), nil
}

// redisLogger is go-redis's logger (redis.SetLogger), writing into a
// server's logger at WARN: go-redis logs connection-pool failures there.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Warn("serve: redis client: "+strings.TrimSpace(fmt.Sprintf(format, v...)), "source", "go-redis")
}
