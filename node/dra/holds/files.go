package holds

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/ibkube/ibkube/contract"
)

const (
	// CDIClass is the class of the driver's CDI devices: a CDI device ID
	// is "<vendor>/<class>=<name>", the driver's name being the vendor.
	CDIClass = "hca"
	// DefaultCDIDir is where containerd and CRI-O look for CDI specs that
	// change at run time (containerd's cdi_spec_dirs default is
	// /etc/cdi and /var/run/cdi), and so where the driver writes them.
	DefaultCDIDir = "/var/run/cdi"
)

// specPrefix starts the name of every spec file the driver writes; the
// claim's UID and ".json" follow.
const specPrefix = contract.DRADriverName + "-" + CDIClass + "_"

// SpecPath is the file of the claim's CDI spec in dir.
func SpecPath(dir string, claim types.UID) string {
	return filepath.Join(dir, specPrefix+string(claim)+".json")
}

// UIDOf is the claim UID a spec file of the driver is named after; false
// for any other file (another driver's spec, a temporary file).
func UIDOf(fileName string) (types.UID, bool) {
	uid, ok := strings.CutPrefix(fileName, specPrefix)
	if !ok {
		return "", false
	}
	uid, ok = strings.CutSuffix(uid, ".json")
	return types.UID(uid), ok && CheckUID(types.UID(uid)) == nil
}

// uidPattern is the form of the UIDs the API server gives objects
// (k8s.io/apimachinery/pkg/util/uuid: an RFC 4122 UUID in lower case).
var uidPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// CheckUID refuses a claim UID that is not the API server's UID form
// before it becomes part of a file name: a "../" in it would reach files
// outside the CDI directory.
func CheckUID(uid types.UID) error {
	if !uidPattern.MatchString(string(uid)) {
		const max = 64
		v := string(uid)
		if len(v) > max {
			v = v[:max] + "..."
		}
		return fmt.Errorf("claim UID %q is not a UID; want the API server's form, 8-4-4-4-12 lower-case hex digits", v)
	}
	return nil
}

// ReadSpec reads and decodes the spec file at path; an error names the
// file, and wraps os.ErrNotExist when there is none.
func ReadSpec(path string) (*cdispec.Spec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CDI spec: %w", err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("%s: not a CDI spec (JSON): %w", path, err)
	}
	return &spec, nil
}

// Listing is what a CDI directory records of the driver's claims.
type Listing struct {
	// Holds are the holds of every prepared claim, by its UID.
	Holds map[types.UID]Holds
	// Unreadable has an error for each of the driver's spec files that
	// could not be read or decoded, naming the file; such a file holds
	// nothing here.
	Unreadable []error
}

// Cache keeps the holds of spec files by name while each file's size and
// modification time stay, so that a Prepare does not decode every spec of
// the node again. The zero Cache is ready to use.
type Cache struct {
	mu    sync.Mutex
	files map[string]cachedHolds
}

type cachedHolds struct {
	size    int64
	modTime time.Time
	holds   Holds
}

// List reads the holds of the driver's spec files in dir; c, when not
// nil, caches them. A directory that does not exist lists nothing.
func List(dir string, c *Cache) (Listing, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return Listing{}, nil
	}
	if err != nil {
		return Listing{}, fmt.Errorf("list CDI specs: %w", err)
	}
	if c == nil {
		c = &Cache{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	present := map[string]bool{}
	out := Listing{Holds: map[types.UID]Holds{}}
	for _, e := range entries {
		uid, ok := UIDOf(e.Name())
		if !ok {
			continue
		}
		present[e.Name()] = true
		h, err := c.holdsOf(dir, e)
		switch {
		case errors.Is(err, os.ErrNotExist):
			// removed meanwhile: the claim was unprepared
		case err != nil:
			out.Unreadable = append(out.Unreadable, err)
		default:
			out.Holds[uid] = h
		}
	}
	for name := range c.files {
		if !present[name] {
			delete(c.files, name)
		}
	}
	return out, nil
}

// holdsOf returns what the spec file e records, from the cache when the
// file has not changed since it was read.
func (c *Cache) holdsOf(dir string, e os.DirEntry) (Holds, error) {
	info, err := e.Info()
	if err != nil {
		return Holds{}, fmt.Errorf("%s: %w", filepath.Join(dir, e.Name()), err)
	}
	if cached, ok := c.files[e.Name()]; ok && cached.size == info.Size() && cached.modTime.Equal(info.ModTime()) {
		return cached.holds, nil
	}
	spec, err := ReadSpec(filepath.Join(dir, e.Name()))
	if err != nil {
		return Holds{}, err
	}
	h := FromSpec(spec)
	if c.files == nil {
		c.files = map[string]cachedHolds{}
	}
	c.files[e.Name()] = cachedHolds{size: info.Size(), modTime: info.ModTime(), holds: h}
	return h, nil
}
