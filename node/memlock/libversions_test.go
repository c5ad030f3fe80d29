package memlock

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// ncclReleases are the releases whose rules the agent's choices are
// tested against, with what each does, read in its own source
// (NVIDIA/nccl tags v2.19.3-1, v2.21.5-1, v2.23.4-1, v2.26.2-1, v2.30.3-1):
// src/transport/net_ib.cc's IB_GID_INDEX default, src/misc/param.cc's
// NCCL_CONF_FILE, '#' skip and home.
var ncclReleases = []struct {
	version                              Version
	autoGID, confFile, comments, homeEnv bool
}{
	{Version{2, 19, 3}, false, false, false, false},
	{Version{2, 21, 5}, true, false, false, false},
	{Version{2, 23, 4}, true, true, false, false},
	{Version{2, 26, 2}, true, true, true, false},
	{Version{2, 30, 3}, true, true, true, true},
}

func TestNCCLPlanPerRelease(t *testing.T) {
	t.Parallel()
	for _, r := range ncclReleases {
		p := NCCLPlan{Found: []NCCLFound{{Version: r.version, From: "test"}}}
		got := []bool{p.Has(FeatureAutoGID), p.Has(FeatureConfFile), p.Has(FeatureCommentLines), p.Has(FeatureHomeFromEnv), p.Has(FeatureDMABUF)}
		want := []bool{r.autoGID, r.confFile, r.comments, r.homeEnv, true}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("NCCL %s features (auto-gid, conf-file, comment-lines, home-from-env, dmabuf) (-want +got)\n%s", r.version, d)
		}
		need, why := p.NeedsGIDIndex(nil)
		if need != !r.autoGID {
			t.Errorf("NCCL %s: NeedsGIDIndex = %v (%s), want %v", r.version, need, why, !r.autoGID)
		}
		// 0 user-set selectors overridden, on every release.
		for _, s := range GIDSelectors() {
			if need, why := p.NeedsGIDIndex([]string{s + "=1"}); need {
				t.Errorf("NCCL %s with %s set: NeedsGIDIndex = true (%s), want false", r.version, s, why)
			}
		}
	}
}

// TestNCCLPlanUnknownAndMixed: with no version the plan is the safe one
// for current releases (no GID index, no comment lines, NCCL_CONF_FILE not
// relied on); with two versions a feature counts only when both have it.
func TestNCCLPlanUnknownAndMixed(t *testing.T) {
	t.Parallel()
	var unknown NCCLPlan
	if need, _ := unknown.NeedsGIDIndex(nil); need || unknown.Has(FeatureCommentLines) || unknown.Has(FeatureConfFile) || unknown.Lacks(FeatureConfFile) {
		t.Errorf("unknown version: want no GID index, no feature relied on and none known missing")
	}
	mixed := NCCLPlan{Found: []NCCLFound{{Version: Version{2, 28, 3}}, {Version: Version{2, 19, 3}}}}
	if need, _ := mixed.NeedsGIDIndex(nil); !need || mixed.Has(FeatureConfFile) || !mixed.Lacks(FeatureConfFile) {
		t.Errorf("2.28.3 with 2.19.3: want a GID index and NCCL_CONF_FILE not relied on")
	}
}

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Version{
		"2.21.5":                 {2, 21, 5},
		"2.28.3-1+cuda13.0":      {2, 28, 3},
		"2.22.3.60400-114~24.04": {2, 22, 3},
		"1.18":                   {1, 18, 0},
	} {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "2", "x.y", "1:2.3"} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("ParseVersion(%q) accepted", bad)
		}
	}
}

// TestRulesTableInDocs: docs/node-agent.md's table of library releases is
// Rules(), row for row; the docs state no minimum version of their own.
func TestRulesTableInDocs(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "node-agent.md"))
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- rules: begin (node/memlock Rules) -->\n", "<!-- rules: end -->\n"
	_, rest, ok := strings.Cut(string(doc), begin)
	got, _, ok2 := strings.Cut(rest, end)
	if !ok || !ok2 {
		t.Fatalf("docs/node-agent.md lacks the %q ... %q block", begin, end)
	}
	if d := cmp.Diff(rulesTable(), got); d != "" {
		t.Errorf("docs/node-agent.md's table differs from Rules() (-want +got):\n%s", d)
	}
}

// rulesTable renders Rules() as the Markdown table docs/node-agent.md
// carries (a test keeps the two equal).
func rulesTable() string {
	var b strings.Builder
	b.WriteString("| library | from | what changed | source |\n|---|---|---|---|\n")
	for _, r := range Rules() {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.Library, r.Since, strings.ReplaceAll(r.What, "|", `\|`), r.Source)
	}
	return b.String()
}
