package cluster

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
)

// logWriter receives memberlist's log lines ("[LEVEL] memberlist: text"),
// passes them to slog at debug level and watches for failed probes.
// log.Logger serialises calls to Write.
type logWriter struct {
	log       *slog.Logger
	onSuspect func(name string)
}

func (w *logWriter) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	level := ""
	if strings.HasPrefix(line, "[") {
		if i := strings.IndexByte(line, ']'); i > 0 {
			level, line = line[1:i], strings.TrimSpace(line[i+1:])
		}
	}
	line = strings.TrimPrefix(line, "memberlist: ")
	if name, ok := suspectName(line); ok && w.onSuspect != nil {
		w.onSuspect(name)
	}
	if w.log.Enabled(context.Background(), slog.LevelDebug) {
		w.log.Debug(line, "component", "memberlist", "level_memberlist", level)
	}
	return len(p), nil
}

// discardLogger drops everything, cheaply.
func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
