// Command probe is the memlock integration test's container program: with
// "pause" it waits for SIGTERM (it doubles as the pod sandbox's pause
// process); with "cat FILE..." it prints the files' contents quoted on one
// line ("absent" for a file it cannot read);
// otherwise it prints its RLIMIT_MEMLOCK, uid and the RDMA device nodes it
// sees, one line, and exits.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// rlimitMemlock is RLIMIT_MEMLOCK (8 on Linux; package syscall does not name it).
const rlimitMemlock = 8

func main() {
	if len(os.Args) > 1 && os.Args[1] == "pause" {
		c := make(chan os.Signal, 1)
		signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
		<-c
		return
	}
	if len(os.Args) > 2 && os.Args[1] == "cat" {
		// "file <quoted content or absent>...".
		out := "file"
		for _, f := range os.Args[2:] {
			b, err := os.ReadFile(f)
			if err != nil {
				out += " absent"
				continue
			}
			out += fmt.Sprintf(" %q", b)
		}
		fmt.Println(out)
		return
	}
	var r syscall.Rlimit
	if err := syscall.Getrlimit(rlimitMemlock, &r); err != nil {
		fmt.Fprintln(os.Stderr, "getrlimit:", err)
		os.Exit(1)
	}
	var devs []string
	if entries, err := os.ReadDir("/dev/infiniband"); err == nil {
		for _, e := range entries {
			devs = append(devs, e.Name())
		}
	}
	fmt.Printf("memlock soft=%d hard=%d uid=%d devices=%s\n", r.Cur, r.Max, os.Getuid(), strings.Join(devs, ","))
}
