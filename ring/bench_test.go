package ring

import (
	"fmt"
	"testing"
)

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("tenant-%d:route-%d", i%977, i)
	}
	return keys
}

// BenchmarkOwner looks up 1M distinct keys on a 3-member ring.
func BenchmarkOwner(b *testing.B) {
	r := mustNew(b, "node-1", "node-2", "node-3")
	keys := benchKeys(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		_, _ = r.Owner(keys[i&(len(keys)-1)])
		i++
	}
}

func BenchmarkSuccessors(b *testing.B) {
	r := mustNew(b, "node-1", "node-2", "node-3", "node-4", "node-5")
	keys := benchKeys(1 << 20)
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		_, _ = r.Successors(keys[i&(len(keys)-1)], 2)
		i++
	}
}

func BenchmarkNew(b *testing.B) {
	for _, n := range []int{3, 20} {
		names := manyNames(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				_, _ = New(names, Config{})
			}
		})
	}
}
