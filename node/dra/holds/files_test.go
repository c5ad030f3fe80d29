package holds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// TestList: the driver's specs are read by the UID in their names, another
// vendor's spec and temporary files are not, a spec cut short is an error
// naming its file, and a cached spec that changes is read again.
func TestList(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const exclusive, garbage = types.UID("00000001-0000-4000-8000-000000000001"), types.UID("00000002-0000-4000-8000-000000000002")
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Base(SpecPath(dir, exclusive)), `{"cdiVersion":"0.6.0","kind":"rdma.infiniband.azure.com/hca","annotations":{"rdma.infiniband.azure.com/exclusive-hcas":"mlx5_0,mlx5_1"}}`)
	write(filepath.Base(SpecPath(dir, garbage)), `{"cdiVersion":"0.6.0","annotations":{"rdma`)
	write("nvidia.com-gpu.json", `{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu"}`)
	write(specPrefix+"not-a-uid.json", `garbage`)
	write(filepath.Base(SpecPath(dir, exclusive))+".tmp123", `garbage`)

	c := &Cache{}
	l, err := List(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[types.UID]Holds{exclusive: {Exclusive: []string{"mlx5_0", "mlx5_1"}}}, l.Holds); diff != "" {
		t.Errorf("holds (-want +got):\n%s", diff)
	}
	if len(l.Unreadable) != 1 || !strings.Contains(l.Unreadable[0].Error(), SpecPath(dir, garbage)+": not a CDI spec") {
		t.Errorf("unreadable = %v, want one error naming %s", l.Unreadable, SpecPath(dir, garbage))
	}

	spec := &cdispec.Spec{Annotations: map[string]string{}}
	Holds{Shared: []string{"mlx5_2"}}.Annotate(spec.Annotations)
	write(filepath.Base(SpecPath(dir, exclusive)), `{"annotations":{"`+AnnotationShared+`":"`+spec.Annotations[AnnotationShared]+`"}}`)
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(SpecPath(dir, exclusive), later, later); err != nil {
		t.Fatal(err)
	}
	if l, err = List(dir, c); err != nil {
		t.Fatal(err)
	}
	if got := l.Holds[exclusive]; !cmp.Equal(got, Holds{Shared: []string{"mlx5_2"}}) {
		t.Errorf("after the spec changed: %+v, want a share of mlx5_2", got)
	}

	if l, err := List(filepath.Join(dir, "absent"), nil); err != nil || len(l.Holds)+len(l.Unreadable) != 0 {
		t.Errorf("an absent directory: %+v, %v; want nothing, no error", l, err)
	}
}
