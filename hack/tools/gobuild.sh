#!/usr/bin/env bash
# gobuild.sh MODULE_DIR OUT STAMP LABEL ESTIMATE -- GO_BUILD_ARGS...
#
# Builds a tool from a helper module under hack/tools/ into OUT, but only when
# OUT is missing or was built with another STAMP (version + flags). Concurrent
# callers (several checkouts sharing _output/bin, parallel make) serialise on
# OUT.lock, so a tool is never built twice at once.
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
echo "building $label ($estimate cold)..." >&2
start=$(date +%s)
rm -f "$out.stamp"
(cd "$moddir" && CGO_ENABLED=${CGO_ENABLED:-0} ${GO:-go} build -trimpath -o "$out.tmp" "$@")
mv -f "$out.tmp" "$out"
printf '%s' "$stamp" >"$out.stamp"
echo "built $label in $(($(date +%s) - start))s -> $out" >&2
