package multus

import "testing"

// BenchmarkMerge measures a webhook admission's annotation work: a pod that
// already names a few networks, in both forms, gets the IPoIB network.
func BenchmarkMerge(b *testing.B) {
	for _, bc := range []struct{ name, value string }{
		{"empty", ""},
		{"csv", "team-a/storage@net5, monitoring, ibkube-system/other@net7"},
		{"json", `[{"name":"storage","namespace":"team-a","interface":"net5","ips":["10.1.2.3/24"]},{"name":"monitoring"}]`},
		{"present", "team-a/storage, ibkube-system/ibkube-ipoib@net1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Merge(bc.value, []Network{ipoib}, "team-a"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
