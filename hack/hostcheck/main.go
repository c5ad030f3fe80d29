// Command hostcheck renders, on the host it runs on, the NCCL conf files
// the node agent would write for an RDMA container whose image is this
// host's root filesystem: it finds the NCCL versions the way the agent
// finds them in an image (imagefs.FindLibraries), decides with the same
// code (memlock.DecideRankConf, NCCLPlan.NeedsGIDIndex), and writes one
// file per user into -out, for hack/host-check.sh to hand to a real NCCL.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ibkube/ibkube/node/imagefs"
	"github.com/ibkube/ibkube/node/memlock"
)

func main() {
	root := flag.String("root", "/", "root filesystem read as the container's image")
	out := flag.String("out", "", "directory the conf files are written to")
	uid := flag.Uint("uid", 4242, "uid of the non-root rank")
	home := flag.String("home", "/home/ibkube-rank", "passwd home of the non-root rank")
	flag.Parse()
	if err := run(*root, *out, uint32(*uid), *home, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hostcheck:", err)
		os.Exit(1)
	}
}

func run(root, out string, uid uint32, home string, w io.Writer) error {
	if out == "" {
		return errors.New("-out is required: the directory the conf files are written to")
	}
	libs, err := imagefs.FindLibraries(context.Background(), hostRead(root))
	if err != nil {
		fmt.Fprintf(w, "libraries: not all read: %v\n", err)
	}
	var plan memlock.NCCLPlan
	for _, l := range libs {
		fmt.Fprintf(w, "library: %s %s (%s)\n", l.Name, l.Version, l.From)
		if v, err := memlock.ParseVersion(l.Version); err == nil && l.Name == "NCCL" {
			plan.Found = append(plan.Found, memlock.NCCLFound{Version: v, From: l.From})
		}
	}
	need, why := plan.NeedsGIDIndex(nil)
	fmt.Fprintf(w, "plan: %s; NCCL_IB_GID_INDEX needed on RoCE: %v (%s)\n", plan, need, why)
	uverbs := memlock.Device{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192}
	for _, u := range []struct {
		name string
		uid  uint32
		home string
	}{{"root", 0, "/root"}, {"rank", uid, home}} {
		in := memlock.RankInput{
			Devices: []memlock.Device{uverbs}, IBDevices: memlock.DeviceSet{{231, 192}: "uverbs0"},
			Env: []string{"HOME=" + u.home, "NCCL_DEBUG=INFO"}, UID: &u.uid,
			Passwd: memlock.Passwd{Status: memlock.PasswdFound, Home: u.home}, NCCL: plan,
		}
		c := memlock.DecideRankConf(in)
		if c.Outcome != memlock.RankWritten {
			return fmt.Errorf("%s: the agent would write no conf file: %s", u.name, c.Reason)
		}
		file := filepath.Join(out, u.name+".nccl.conf")
		if err := os.WriteFile(file, []byte(c.Content), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", file, err)
		}
		fmt.Fprintf(w, "%s: %s -> %s\n%s: %s\n", u.name, file, strings.Join(c.Targets, ", "), u.name, c.Reason)
	}
	return nil
}

// hostRead reads a file under root, as imagefs reads one in an image.
func hostRead(root string) imagefs.ReadFunc {
	return func(_ context.Context, name string, max int64) ([]byte, error) {
		f, err := os.Open(filepath.Join(root, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", name, imagefs.ErrNotExist)
		}
		if err != nil {
			return nil, err
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, max+1))
		if err == nil && int64(len(b)) > max {
			err = fmt.Errorf("%s: %w", name, imagefs.ErrTooLarge)
		}
		return b, err
	}
}
