package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/ibkube/ibkube/hca/inventory"
	"github.com/ibkube/ibkube/internal/atomicfile"
)

// Scanner reads the node's HCA inventory (hca/discovery.Scanner).
type Scanner interface {
	Scan(ctx context.Context) (inventory.Node, error)
}

// Options are the plugin's collaborators.
type Options struct {
	// NewScanner returns the inventory reader for the config's sysfs and
	// dev roots.
	NewScanner func(sysfsRoot, devRoot string) Scanner
	// Exec runs the delegate; nil is the real one (found in CNI_PATH).
	Exec invoke.Exec
	// Stdout receives the ADD result; nil is os.Stdout.
	Stdout io.Writer
}

// Plugin implements the CNI commands.
type Plugin struct{ opts Options }

// New returns a Plugin.
func New(opts Options) *Plugin {
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	return &Plugin{opts: opts}
}

// Funcs are the plugin's commands for skel.PluginMainFuncs.
func (p *Plugin) Funcs() skel.CNIFuncs {
	return skel.CNIFuncs{Add: p.Add, Check: p.Check, Del: p.Del, Status: p.Status, GC: p.GC}
}

// record is what ADD remembers per attachment for CHECK and DEL.
type record struct {
	Network     string          `json:"network"`
	ContainerID string          `json:"containerID"`
	IfName      string          `json:"ifName"`
	Parent      Parent          `json:"parent"`
	Delegate    json.RawMessage `json:"delegate"`
}

// withConf parses the network config on stdin and runs cmd with it. Either
// one's error comes back as the CNI error the runtime reads: a config that
// does not parse names no network, an error of cmd names conf's.
func withConf(args *skel.CmdArgs, cmd func(conf *NetConf) error) error {
	conf, err := ParseConfig(args.StdinData)
	if err != nil {
		return cniError(err, "")
	}
	if err := cmd(conf); err != nil {
		return cniError(err, conf.Name)
	}
	return nil
}

// Add resolves the parent, records it and delegates ADD.
func (p *Plugin) Add(args *skel.CmdArgs) error {
	var result types.Result
	err := withConf(args, func(conf *NetConf) error {
		var err error
		result, err = p.add(context.Background(), conf, args)
		return err
	})
	if err != nil {
		return err
	}
	return result.PrintTo(p.opts.Stdout)
}

// add is ADD up to its result in the config's CNI version.
func (p *Plugin) add(ctx context.Context, conf *NetConf, args *skel.CmdArgs) (types.Result, error) {
	parent, err := p.resolve(ctx, conf)
	if err != nil {
		return nil, err
	}
	delegate, err := conf.DelegateConfig(parent, false)
	if err != nil {
		return nil, err
	}
	dt, _ := conf.DelegateType()
	path := statePath(conf, args)
	// Record first: if the delegate half-succeeds, DEL still knows the parent.
	rec := record{Network: conf.Name, ContainerID: args.ContainerID, IfName: args.IfName, Parent: parent, Delegate: delegate}
	if err := writeRecord(path, rec); err != nil {
		return nil, err
	}
	result, err := invoke.DelegateAdd(ctx, dt, delegate, p.opts.Exec)
	if err != nil {
		_ = os.Remove(path)
		return nil, delegateErr(dt, parent, err)
	}
	versioned, err := result.GetAsVersion(conf.CNIVersion)
	if err != nil {
		_ = invoke.DelegateDel(ctx, dt, delegate, p.opts.Exec)
		_ = os.Remove(path)
		return nil, fmt.Errorf("convert the %s result to CNI %s: %w", dt, conf.CNIVersion, err)
	}
	return versioned, nil
}

// Check delegates CHECK with the parent chosen at ADD.
func (p *Plugin) Check(args *skel.CmdArgs) error {
	return withConf(args, func(conf *NetConf) error {
		rec, err := readRecord(statePath(conf, args))
		if errors.Is(err, fs.ErrNotExist) {
			return types.NewError(types.ErrUnknownContainer, fmt.Sprintf(
				"%s: network %q: no attachment recorded for container %s interface %s", PluginType, conf.Name, args.ContainerID, args.IfName), "")
		}
		if err != nil {
			return err
		}
		delegate, err := conf.DelegateConfig(rec.Parent, true)
		if err != nil {
			return err
		}
		dt, _ := conf.DelegateType()
		if err := invoke.DelegateCheck(context.Background(), dt, delegate, p.opts.Exec); err != nil {
			return delegateErr(dt, rec.Parent, err)
		}
		return nil
	})
}

// Del delegates DEL with the config ADD recorded, then forgets it. With no
// record there is nothing of ours to undo: ADD never ran, failed (the
// delegate cleaned up after itself and the record was removed) or DEL
// already ran; DEL then succeeds without calling the delegate, which keeps
// it idempotent even over delegates that are not (host-device fails a
// second DEL).
func (p *Plugin) Del(args *skel.CmdArgs) error {
	return withConf(args, func(conf *NetConf) error {
		dt, _ := conf.DelegateType()
		path := statePath(conf, args)
		rec, err := readRecord(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := invoke.DelegateDel(context.Background(), dt, rec.Delegate, p.opts.Exec); err != nil {
			return delegateErr(dt, rec.Parent, err)
		}
		return removeRecord(path)
	})
}

// GC forgets the records of this network's attachments that the runtime
// no longer lists as valid (cni.dev/valid-attachments). The delegates'
// resources are released by the runtime's DEL; many delegates do not know
// GC yet, so it is not passed on.
func (p *Plugin) GC(args *skel.CmdArgs) error {
	return withConf(args, func(conf *NetConf) error {
		var gc struct {
			Valid []types.GCAttachment `json:"cni.dev/valid-attachments"`
		}
		if err := json.Unmarshal(args.StdinData, &gc); err != nil {
			return &ConfigError{Msg: fmt.Sprintf("%s: cni.dev/valid-attachments: %v", PluginType, err)}
		}
		valid := map[[2]string]bool{}
		for _, a := range gc.Valid {
			valid[[2]string{a.ContainerID, a.IfName}] = true
		}
		dir := stateDir(conf)
		entries, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read state dir: %w", err)
		}
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			rec, err := readRecord(path)
			if err != nil || rec.Network != conf.Name || valid[[2]string{rec.ContainerID, rec.IfName}] {
				continue
			}
			if err := removeRecord(path); err != nil {
				return err
			}
		}
		return nil
	})
}

// Status reports ready when the config is valid and a parent resolves now.
func (p *Plugin) Status(args *skel.CmdArgs) error {
	return withConf(args, func(conf *NetConf) error {
		_, err := p.resolve(context.Background(), conf)
		return err
	})
}

func (p *Plugin) resolve(ctx context.Context, conf *NetConf) (Parent, error) {
	if p.opts.NewScanner == nil {
		return Parent{}, errors.New("no inventory scanner configured")
	}
	sysfs, dev := conf.SysfsRoot, conf.DevRoot
	if sysfs == "" {
		sysfs = DefaultSysfsRoot
	}
	if dev == "" {
		dev = DefaultDevRoot
	}
	node, err := p.opts.NewScanner(sysfs, dev).Scan(ctx)
	if err != nil {
		return Parent{}, &ResolveError{Transient: true, Msg: fmt.Sprintf("read the HCA inventory under %s: %v", sysfs, err)}
	}
	req, err := conf.request()
	if err != nil {
		return Parent{}, err
	}
	return Resolve(node, conf.EffectiveParent(), req)
}

func delegateErr(dt string, parent Parent, err error) error {
	var te *types.Error
	if errors.As(err, &te) {
		return types.NewError(te.Code, fmt.Sprintf("%s: delegate %s on %s (%s port %d): %s",
			PluginType, dt, parent.Netdev, parent.HCA, parent.Port, te.Msg), te.Details)
	}
	return fmt.Errorf("delegate %s on %s (%s port %d): %w", dt, parent.Netdev, parent.HCA, parent.Port, err)
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// stateDir is where the network's attachment records live.
func stateDir(conf *NetConf) string {
	if conf.StateDir == "" {
		return DefaultStateDir
	}
	return conf.StateDir
}

func statePath(conf *NetConf, args *skel.CmdArgs) string {
	name := unsafeChars.ReplaceAllString(conf.Name+"_"+args.ContainerID+"_"+args.IfName, "_")
	return filepath.Join(stateDir(conf), name+".json")
}

// removeRecord forgets an attachment's record; one already gone is no
// error (a DEL retried, or GC and DEL at once).
func removeRecord(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

func writeRecord(path string, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode state: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if err := atomicfile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func readRecord(path string) (record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("read state %s: %w", path, err)
	}
	return r, nil
}
