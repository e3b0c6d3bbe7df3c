package ringlimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ringlimit/ringlimit"
	"github.com/ringlimit/ringlimit/limiter"
)

// A log-key secret shorter than 32 bytes, or one given with plain log
// keys, is an error naming LogKeySecret.
func TestLogKeySecretChecked(t *testing.T) {
	for _, c := range []struct {
		name   string
		plain  bool
		secret string
	}{{"short", false, "0123456789"}, {"with plain keys", true, "0123456789abcdef0123456789abcdef"}} {
		cfg := nodeConfig("log-key-secret")
		cfg.LogPlainKeys, cfg.LogKeySecret = c.plain, []byte(c.secret)
		var ie *limiter.InputError
		if n, err := ringlimit.Start(context.Background(), cfg); !errors.As(err, &ie) || ie.Field != "LogKeySecret" {
			if n != nil {
				n.Close(context.Background())
			}
			t.Errorf("%s: %v, want an InputError on LogKeySecret", c.name, err)
		}
	}
}

// Replicas past MaxReplicas is refused, naming the field (a million was
// accepted silently); MaxReplicas itself is accepted.
func TestReplicasBound(t *testing.T) {
	cfg := nodeConfig("replicas")
	cfg.Replicas = 1000000
	var ie *limiter.InputError
	if n, err := ringlimit.Start(context.Background(), cfg); !errors.As(err, &ie) || ie.Field != "Replicas" {
		if n != nil {
			n.Close(context.Background())
		}
		t.Errorf("Replicas 1000000: %v, want an InputError on Replicas", err)
	}
	cfg.Replicas = ringlimit.MaxReplicas
	n, err := ringlimit.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Replicas %d: %v", ringlimit.MaxReplicas, err)
	}
	if err := n.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
