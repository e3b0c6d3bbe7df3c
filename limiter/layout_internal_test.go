package limiter

import (
	"testing"
	"unsafe"
)

// Shards sit in one array and are locked by different cores: each must
// fill whole cache lines, or two hot shards would share one.
func TestShardLayout(t *testing.T) {
	if size := unsafe.Sizeof(shard{}); size%128 != 0 {
		t.Fatalf("shard is %d bytes; pad it to a multiple of 128", size)
	}
}
