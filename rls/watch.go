package rls

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// Watch reloads the service's rules from paths (as Load reads them)
// whenever they change, until ctx is done or stop is called; stop waits
// for the watch to end. It watches each directory (a file's own
// directory), so it sees files written in place, replaced by a rename
// (as editors do), added or removed, and a Kubernetes ConfigMap update:
// the kubelet writes the new files into a fresh "..TIMESTAMP" directory
// and renames a "..data_tmp" symlink over "..data", which the watch sees
// as "..data" being created.
//
// A change that does not load (bad YAML, a bad rule) is logged and
// counted (ratelimit_service_config_load_error_total); the service keeps
// its rules until a good one arrives. Settings other than the rules
// (Config.MaxDescriptors, the headers, ...) are kept. log may be nil.
func (s *Service) Watch(ctx context.Context, log *slog.Logger, paths ...string) (stop func(), err error) {
	if len(paths) == 0 {
		return nil, &ConfigError{Reason: "no configuration file given"}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("rls: watch: %w", err)
	}
	dirs := map[string]bool{}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			w.Close()
			return nil, &ConfigError{File: p, Reason: err.Error()}
		}
		dir := p
		if !st.IsDir() {
			dir = filepath.Dir(p)
		}
		if dirs[dir] {
			continue
		}
		dirs[dir] = true
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, fmt.Errorf("rls: watch %s: %w", dir, err)
		}
	}
	// What the files hold now: an event that leaves them as they are
	// (a touch, the kubelet's cleanup of the old directory) reloads
	// nothing. A change made between the caller's Load and this line is
	// seen at the next event.
	last, _ := readAll(paths)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn("rls: watching the envoy configuration", "err", err)
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if !relevant(ev) {
					continue
				}
				// Take the whole burst of events (an update writes
				// several) before reading once.
				for drained := false; !drained; {
					select {
					case <-w.Events:
					default:
						drained = true
					}
				}
				last = s.reloadIfChanged(paths, last, log)
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { cancel(); <-done }) }, nil
}

// relevant tells the events that may change what Load reads: a
// .yaml/.yml name, or the kubelet's "..data" link; the kubelet's other
// dot names (..data_tmp, ..TIMESTAMP) and other files are not.
func relevant(ev fsnotify.Event) bool {
	name := filepath.Base(ev.Name)
	if name == "..data" {
		return true
	}
	return !strings.HasPrefix(name, ".") && (strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml"))
}

// reloadIfChanged loads paths and, when what they hold differs from last,
// reloads the service's rules. It returns what it read.
func (s *Service) reloadIfChanged(paths []string, last []byte, log *slog.Logger) []byte {
	now, err := readAll(paths)
	if err == nil && bytes.Equal(now, last) {
		return last
	}
	cfg, err := Load(paths...)
	if err == nil {
		err = s.reloadDomains(cfg.Domains)
	} else {
		s.stats.loadErr.Add(1)
	}
	if err != nil {
		log.Error("rls: envoy configuration not reloaded; the previous rules still apply", "err", err)
	} else {
		log.Info("rls: envoy configuration reloaded", "paths", paths, "domains", len(cfg.Domains))
	}
	return now
}

// readAll returns the names and contents of the files Load would read, to
// tell a change from a repeated event.
func readAll(paths []string) ([]byte, error) {
	files, err := configFiles(paths)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s\x00%d\x00", f, len(data))
		b.Write(data)
	}
	return b.Bytes(), nil
}
