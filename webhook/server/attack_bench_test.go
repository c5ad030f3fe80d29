package server

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The attack benchmarks replay, on loopback, what an attacker in any pod
// could do to the admission port, and report the peak memory it cost:
// peak-heap-MiB (Go heap objects) and peak-RSS-MiB (the whole test process,
// attacker included: VmHWM after a reset through /proc/self/clear_refs).
// They report figures and assert nothing; the tests in serve_test.go assert
// the bounds.

// resetPeakRSS restarts the kernel's VmHWM count for this process.
func resetPeakRSS(b *testing.B) {
	b.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// peakRSSMiB reads VmHWM from /proc/self/status.
func peakRSSMiB(b *testing.B) float64 {
	b.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// BenchmarkAttackStalledUploads: 40 connections announce a 4 MiB body (the
// largest the webhook believes) or an 8 MiB one, send one byte and stall.
func BenchmarkAttackStalledUploads(b *testing.B) {
	for _, size := range []int{4, 8} {
		b.Run(strconv.Itoa(size)+"MiB", func(b *testing.B) { stalledUploads(b, size*mib) })
	}
}

func stalledUploads(b *testing.B, declared int) {
	const clients = 40
	a := startAttackServer(b, noDrain(DefaultLimits()))
	var heap, rss float64
	for b.Loop() {
		base := liveHeap()
		resetPeakRSS(b)
		a.entered.Store(0)
		turned := a.rejected(b, "in_flight")
		conns := make([]*tls.Conn, clients)
		for i := range conns {
			conns[i] = a.dial(b)
			if _, err := io.WriteString(conns[i], stalledHeader(declared)); err != nil {
				b.Fatal(err)
			}
		}
		// Each connection is in the handler, turned away, or answered (413).
		waitFor(b, "every stalled request admitted or answered", func() bool {
			return int(a.entered.Load())+a.rejected(b, "in_flight")-turned == clients
		})
		heap = max(heap, float64(int64(heapBytes())-int64(base))/mib)
		rss = max(rss, peakRSSMiB(b))
		for _, c := range conns {
			_ = c.Close()
		}
	}
	b.ReportMetric(heap, "peak-heap-MiB")
	b.ReportMetric(rss, "peak-RSS-MiB")
}

// BenchmarkAttackConcurrentBodies: 32 clients at once send a review of the
// largest accepted size (4MiB) or one twice that (8MiB, refused by size).
func BenchmarkAttackConcurrentBodies(b *testing.B) {
	for _, size := range []int{4, 8} {
		b.Run(strconv.Itoa(size)+"MiB", func(b *testing.B) {
			a := startAttackServer(b, noDrain(DefaultLimits()))
			body := bigReview(b, size*mib)
			var heap, rss float64
			var codes map[int]int
			for b.Loop() {
				base := liveHeap()
				resetPeakRSS(b)
				var peak uint64
				codes, peak = flood(b, a, 32, body)
				heap = max(heap, float64(int64(peak)-int64(base))/mib)
				rss = max(rss, peakRSSMiB(b))
			}
			b.ReportMetric(heap, "peak-heap-MiB")
			b.ReportMetric(rss, "peak-RSS-MiB")
			b.ReportMetric(float64(codes[http.StatusOK]), "ok/op")
			b.ReportMetric(float64(codes[http.StatusTooManyRequests]), "429/op")
			b.ReportMetric(float64(codes[http.StatusRequestEntityTooLarge]), "413/op")
		})
	}
}
