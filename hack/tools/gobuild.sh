#!/usr/bin/env bash
# gobuild.sh MODULE_DIR OUT STAMP LABEL ESTIMATE -- GO_BUILD_ARGS...
#
# Builds a tool from a helper module under hack/tools/ into OUT, but only when
# OUT is missing or was built with another STAMP (version + flags). Concurrent
# callers (several checkouts sharing _output/bin, parallel make) serialise on
# OUT.lock, so a tool is never built twice at once.
#
# While it builds it says how far it got: the packages the go command has
# compiled (go build -v names each) out of the packages the tool links (go
# list -deps), every 10% and at least once a minute, with the time left
# extrapolated from the rate so far. ESTIMATE is the cold build time measured
# on a 2-core machine (hack/make/tools.mk says how), shown before the first
# figures exist.
set -euo pipefail
moddir=$1 out=$2 stamp=$3 label=$4 estimate=$5
shift 5
[[ ${1:-} == -- ]] && shift

mkdir -p "$(dirname "$out")"
exec 9>"$out.lock"
flock 9
if [[ -x $out && -f $out.stamp && "$(cat "$out.stamp")" == "$stamp" ]]; then
	exit 0
fi

# The packages the build links; go build -v names those it compiles, so on a
# warm build cache it names fewer.
total=$(cd "$moddir" && ${GO:-go} list -deps -trimpath "$@" 2>/dev/null | wc -l) || total=0

# human SECONDS: 95 -> 1m35s
human() { if (($1 >= 60)); then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi; }

# progress reads go build -v's stderr: a package path per compiled package,
# anything else (an error) passed through.
progress() {
	local n=0 next=10 last=0 line pct left
	while IFS= read -r line; do
		if [[ ! $line =~ ^[A-Za-z0-9._~+/-]+$ ]]; then
			printf '%s\n' "$line" >&2
			continue
		fi
		n=$((n + 1))
		((total > 0)) || continue
		pct=$((100 * n / total))
		if ((pct < next && SECONDS - last < 60)); then
			continue
		fi
		while ((next <= pct)); do next=$((next + 10)); done
		last=$SECONDS
		if ((pct >= 10)); then
			left="about $(human $((SECONDS * (total - n) / n))) left"
		else
			left="measured $estimate cold"
		fi
		echo "  $label: $n/$total packages compiled ($pct%), $(human $SECONDS) so far, $left" >&2
	done
}

echo "building $label: $total packages to link (measured $estimate cold on 2 cores; progress every 10%)..." >&2
SECONDS=0
rm -f "$out.stamp"
(cd "$moddir" && CGO_ENABLED=${CGO_ENABLED:-0} ${GO:-go} build -v -trimpath -o "$out.tmp" "$@") 2>&1 | progress
mv -f "$out.tmp" "$out"
printf '%s' "$stamp" >"$out.stamp"
echo "built $label in ${SECONDS}s -> $out" >&2
