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
