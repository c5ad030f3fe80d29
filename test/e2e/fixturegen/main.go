// Command fixturegen writes a simulated InfiniBand host (sys/ and dev/ trees
// from hca/fixture) with real char devices, for make demo and manual
// runs of the e2e node:
//
//	fixturegen -dir /dev/ibk-e2e-fixture -name ndv5
//	fixturegen -dir /dev/ibk-e2e-fixture -port mlx5_3:1:DOWN
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ibkube/ibkube/hca/fixture"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fixturegen:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("fixturegen", flag.ContinueOnError)
	dir := fs.String("dir", "", "fixture directory")
	name := fs.String("name", fixture.NDv5, "fixture name: "+strings.Join(fixture.Names(), ", "))
	port := fs.String("port", "", "instead of building, set a port state: DEV:PORT:STATE (e.g. mlx5_3:1:DOWN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("-dir is required")
	}
	if *port != "" {
		parts := strings.Split(*port, ":")
		if len(parts) != 3 {
			return fmt.Errorf("-port %q: want DEV:PORT:STATE", *port)
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil {
			return fmt.Errorf("-port %q: %w", *port, err)
		}
		return fixture.SetPortState(*dir, parts[0], n, parts[2])
	}
	if err := os.RemoveAll(*dir); err != nil {
		return err
	}
	return fixture.Build(*dir, *name, fixture.WithCharDevices())
}
