package nri

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
)

// TestRCCLContainerGetsRCCLConf: an AMD GPU container (it holds /dev/kfd)
// and one whose image lists the rccl package get the rank conf at
// .rccl.conf too, where RCCL looks; an NVIDIA container only at .nccl.conf.
func TestRCCLContainerGetsRCCLConf(t *testing.T) {
	t.Parallel()
	rootPasswd := "root:x:0:0:root:/root:/bin/bash\n"
	dir, node := scanOCI(t)
	dpkgRCCL := "Package: rccl\nStatus: install ok installed\nVersion: 2.22.3.60400-114~24.04\n"
	for _, tc := range []struct {
		name string
		img  image
		kfd  bool
		want []string
	}{
		{"NVIDIA container", image{"/etc/passwd": rootPasswd}, false, []string{"/root/.nccl.conf"}},
		{"AMD container (/dev/kfd)", image{"/etc/passwd": rootPasswd}, true, []string{"/root/.nccl.conf", "/root/.rccl.conf"}},
		{"image with the rccl package", image{"/etc/passwd": rootPasswd, "/var/lib/dpkg/status": dpkgRCCL}, false, []string{"/root/.nccl.conf", "/root/.rccl.conf"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := pluginOn(t, dir, node, tc.img, nil)
			c := f.ctr(t, "w", []string{"NCCL_IB_HCA==mlx5_0:1"}, "mlx5_0")
			if tc.kfd {
				c.Linux.Devices = append(c.Linux.Devices, &api.LinuxDevice{Path: amdKFD, Type: "c", Major: 235, Minor: 0})
			}
			pod := &api.PodSandbox{Id: "p", Name: "p", Namespace: "hpc", Uid: "p"}
			var got []string
			for _, m := range f.p.createContainer(pod, c).GetMounts() {
				got = append(got, m.GetDestination())
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("mount targets (-want +got):\n%s", d)
			}
		})
	}
}

// TestImageHomeConfCarried: an image with NCCL 2.19.3 (no NCCL_CONF_FILE)
// and its own /root/.nccl.conf: the file the agent mounts there carries the
// image's settings below the profile's, as the main process read them
// before the mount hid the image's file.
func TestImageHomeConfCarried(t *testing.T) {
	t.Parallel()
	img := withNCCL(2, 19, 3)
	img["/root/.nccl.conf"] = "NCCL_SOCKET_IFNAME=eth9\nNCCL_NET_GDR_LEVEL=LOC\n"
	f := newGIDFixture(t, img, nil)
	pod := &api.PodSandbox{Id: "p", Name: "p", Namespace: "hpc", Uid: "p",
		Annotations: map[string]string{contract.AnnotationNCCLConf: "NCCL_NET_GDR_LEVEL=SYS\n"}}
	c := f.ctr(t, "w", []string{"NCCL_IB_HCA==mlx5_0:1", "NCCL_CONF_FILE=" + contract.NCCLConfFile}, "mlx5_0")
	if f.p.createContainer(pod, c) == nil {
		t.Fatal("no adjustment")
	}
	conf, err := os.ReadFile(filepath.Join(f.p.cfg.RankConfDir, "w"+rankConfSuffix))
	if err != nil {
		t.Fatal(err)
	}
	if want := "NCCL_IB_HCA==mlx5_0:1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_SOCKET_IFNAME=eth9\n"; string(conf) != want {
		t.Errorf("rank conf %q, want %q", conf, want)
	}
}
