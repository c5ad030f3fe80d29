#!/usr/bin/env bash
# The host check (make host-check): what ibkube sees on this host and, where
# a GPU and NCCL are present, whether a real NCCL reads the conf files the
# node agent writes, as root and as a non-root rank started the way sshd
# starts one (empty environment, HOME = the passwd home). Every step's output
# is kept under $OUT; a step that cannot run here says SKIP and why. The
# whole check is bounded by HOST_CHECK_TIMEOUT (make host-check: 300 s).
set -uo pipefail

OUT=${OUT:?OUT must name the output directory}
IBKUBE=${IBKUBE:?IBKUBE must name the ibkube binary}
HOSTCHECK=${HOSTCHECK:?HOSTCHECK must name the hostcheck binary}
RANK_UID=${RANK_UID:-4242}
RANK_HOME=/home/ibkube-rank
STEP_TIMEOUT=${STEP_TIMEOUT:-120}
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME CMD...: runs CMD with its output in $OUT/NAME.txt; the status
# line says whether it exited 0.
step() {
	local name=$1
	shift
	timeout "$STEP_TIMEOUT" "$@" >"$OUT/$name.txt" 2>&1
	local rc=$?
	if [ $rc -eq 0 ]; then say "PASS  $name"; else say "FAIL  $name (exit $rc; see $OUT/$name.txt)"; fi
	return $rc
}

say "host: $(uname -r) $(hostname); $(date -u +%FT%TZ)"
# What ibkube sees is the answer, whatever it is: a host without an HCA
# makes `ibkube node` exit 1 and the doctor fail its RDMA checks.
info() {
	local name=$1
	shift
	timeout "$STEP_TIMEOUT" "$@" >"$OUT/$name.txt" 2>&1
	say "INFO  $name exit $?: $(head -1 "$OUT/$name.txt")"
}
info node "$IBKUBE" node
info node-slices "$IBKUBE" node -o slices --node-name "$(hostname)"
timeout "$STEP_TIMEOUT" "$IBKUBE" doctor --nri=false >"$OUT/doctor.txt" 2>&1
say "INFO  doctor exit $?: $(tail -1 "$OUT/doctor.txt"); $(grep -m1 'gpudirect' "$OUT/doctor.txt" | cut -c1-160)"
mkdir -p "$OUT/rankconf"
step rankconf "$HOSTCHECK" -out "$OUT/rankconf" -uid "$RANK_UID" -home "$RANK_HOME" || exit 1

# A real NCCL: PyTorch's, one rank on one GPU.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
	say "SKIP  nccl-root, nccl-rank: no NVIDIA GPU (nvidia-smi -L fails)"
	exit 0
fi
if ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() and torch.distributed.is_nccl_available() else 1)' >"$OUT/torch.txt" 2>&1; then
	say "SKIP  nccl-root, nccl-rank: python3 has no torch with CUDA and NCCL (see $OUT/torch.txt)"
	exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v unshare >/dev/null || ! command -v setpriv >/dev/null; then
	say "SKIP  nccl-root, nccl-rank: needs root, unshare and setpriv (to mount the files where the agent mounts them, in a private mount namespace)"
	exit 0
fi
cat >"$OUT/nccl_probe.py" <<'PY'
import os, socket, torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
t = torch.ones(1, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("probe: all_reduce", t.item(), "uid", os.getuid(), "HOME", os.environ.get("HOME"), "NCCL", torch.cuda.nccl.version())
dist.destroy_process_group()
PY
chmod 0644 "$OUT/nccl_probe.py"
# nccl_in_namespace HOME UID FILE: in a private mount namespace (nothing
# on the host changes), FILE is bind-mounted over HOME/.nccl.conf as the
# agent mounts it, or, where there is no such file to mount over, a tmpfs
# over HOME holds it; /etc/passwd gains the rank's entry; python runs with
# an empty environment but HOME, as sshd starts a rank. NCCL_DEBUG=INFO is
# only in the file: "NCCL INFO" lines prove NCCL read it.
nccl_in_namespace() {
	local home=$1 uid=$2 file=$3
	unshare --mount --propagation private bash -c '
		set -e
		home=$1 uid=$2 file=$3 out=$4
		probe=$out/nccl_probe.py
		if [ -e "$home/.nccl.conf" ]; then
			mount --bind "$file" "$home/.nccl.conf"
		else
			if [ ! -d "$home" ]; then
				mount -t tmpfs -o mode=0755 none "$(dirname "$home")"
				mkdir -p "$home"
			fi
			mount -t tmpfs -o mode=0755 none "$home"
			cp "$file" "$home/.nccl.conf"
			cp "$probe" "$home/nccl_probe.py"
			probe=$home/nccl_probe.py
			chown -R "$uid:$uid" "$home"
		fi
		if ! getent passwd "$uid" >/dev/null; then
			cp /etc/passwd "$out/passwd"
			echo "ibkube-rank:x:$uid:$uid::$home:/bin/sh" >>"$out/passwd"
			mount --bind "$out/passwd" /etc/passwd
		fi
		exec setpriv --reuid "$uid" --regid "$uid" --clear-groups env -i HOME="$home" PATH=/usr/local/bin:/usr/bin:/bin python3 "$probe"
	' _ "$home" "$uid" "$file" "$OUT"
}
for who in root rank; do
	if [ $who = root ]; then home=/root uid=0; else home=$RANK_HOME uid=$RANK_UID; fi
	timeout "$STEP_TIMEOUT" bash -c "$(declare -f nccl_in_namespace); OUT=$OUT nccl_in_namespace $home $uid $OUT/rankconf/$who.nccl.conf" >"$OUT/nccl-$who.txt" 2>&1
	rc=$?
	if [ $rc -eq 0 ] && grep -q 'NCCL INFO' "$OUT/nccl-$who.txt"; then
		say "PASS  nccl-$who: NCCL read $home/.nccl.conf ($(grep -m1 -o 'NCCL version [^ ]*' "$OUT/nccl-$who.txt"))"
	else
		say "FAIL  nccl-$who: exit $rc, NCCL INFO lines $(grep -c 'NCCL INFO' "$OUT/nccl-$who.txt"); see $OUT/nccl-$who.txt"
	fi
done
