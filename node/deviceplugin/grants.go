package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// GrantsFileName is the file, in the agent's state directory, where the
// HCAs given to each shared slot are recorded. The kubelet's PodResources
// API lists a shared container's slot IDs only; this says which HCAs each
// slot reaches, for the agent's overlap report and ibkube doctor. A slot ID
// the kubelet hands out again is overwritten; entries of slots nobody
// holds are harmless, since readers look up only slots PodResources lists.
const GrantsFileName = "shared-grants.json"

// SlotGrants maps a resource name to its slots' HCAs.
type SlotGrants map[string]map[string][]string

type grantsDoc struct {
	Resources SlotGrants `json:"resources"`
}

// GrantsFile records grants in a JSON file, replaced atomically.
type GrantsFile struct {
	Path string
	mu   sync.Mutex
}

// Record implements Grants.
func (g *GrantsFile) Record(resource string, slots, hcas []string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	all, err := LoadGrants(g.Path)
	if err != nil {
		all = SlotGrants{} // an unreadable file is replaced, not kept
	}
	if all[resource] == nil {
		all[resource] = map[string][]string{}
	}
	for _, s := range slots {
		all[resource][s] = append([]string(nil), hcas...)
	}
	data, err := json.Marshal(grantsDoc{Resources: all})
	if err != nil {
		return fmt.Errorf("encode slot grants: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(g.Path), 0o755); err != nil {
		return fmt.Errorf("slot grants dir: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(g.Path), "."+filepath.Base(g.Path)+".*")
	if err != nil {
		return fmt.Errorf("write slot grants: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write slot grants %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write slot grants %s: %w", tmp.Name(), err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("slot grants %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), g.Path); err != nil {
		return fmt.Errorf("replace slot grants %s: %w", g.Path, err)
	}
	return nil
}

// LoadGrants reads the grants file; a missing file is no grants.
func LoadGrants(path string) (SlotGrants, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return SlotGrants{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read slot grants: %w", err)
	}
	var doc grantsDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("slot grants %s: %w", path, err)
	}
	if doc.Resources == nil {
		doc.Resources = SlotGrants{}
	}
	return doc.Resources, nil
}
