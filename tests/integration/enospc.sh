#!/bin/bash
# enospc.sh - fill a small filesystem in many ways.  Each pattern must end in
# ENOSPC and nothing else; data written before must stay intact; the daemon
# must keep running; unlink/rmdir/rename/truncate must still work on the
# full filesystem and free space so that writing works again; fsck is clean
# after every pattern.
. "$(dirname "$0")/lib.sh" "$@"

# a smaller image in CI: the same patterns fill it, in half the creates
fs_mkfs -s "$([ "$SCALE" = full ] && echo 64M || echo 32M)"
fs_mount

# a reference file that must survive every pattern untouched
head -c 3000000 /dev/urandom >"$TMP/ref"
cp "$TMP/ref" "$MNT/keep"
sync -f "$MNT/keep" || { tail -n 40 "$DAEMON_LOG" >&2; fail "sync after the first write"; }
REF_SUM=$(sha256sum <"$TMP/ref" | cut -d' ' -f1)

# run_fill NAME PYTHON: the python code fills $MNT/fill; it must stop with
# ENOSPC (exit 0 from the harness below) and not any other error
run_fill() {
	local name=$1 code=$2
	log "pattern $name"
	mkdir -p "$MNT/fill"
	(cd "$MNT/fill" && python3 - "$code" <<'EOF') || fail "$name: did not end in ENOSPC"
import errno, os, sys
code = sys.argv[1]
try:
    exec(code)
except OSError as e:
    if e.errno == errno.ENOSPC:
        sys.exit(0)
    print("unexpected error: %r" % e, file=sys.stderr)
    sys.exit(1)
print("filled without ENOSPC?", file=sys.stderr)
sys.exit(1)
EOF
	kill -0 "$DAEMON_PID" || fail "$name: daemon died"
	[ "$(sha256sum <"$MNT/keep" | cut -d' ' -f1)" = "$REF_SUM" ] ||
		fail "$name: earlier data damaged"
	# the full filesystem still deletes, renames and truncates
	local any
	any=$(find "$MNT/fill" -type f -print -quit)
	if [ -n "$any" ]; then
		mv "$any" "$any.renamed" || fail "$name: rename on a full fs"
		truncate -s 0 "$any.renamed" || fail "$name: truncate on a full fs"
	fi
	rm -rf "$MNT/fill" || fail "$name: rm -rf on a full fs"
	# (not syncfs: with the writeback cache the kernel reports the fill's
	# ENOSPC writeback error once more to the next syncfs of the mount)
	python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.fsync(fd)' "$MNT/keep" ||
		fail "$name: fsync after freeing"
	# and writing works again
	head -c 8000000 /dev/zero >"$MNT/after" || fail "$name: cannot write after freeing"
	rm -f "$MNT/after"
	fs_umount
	check_fsck
	fs_mount
	[ "$(sha256sum <"$MNT/keep" | cut -d' ' -f1)" = "$REF_SUM" ] ||
		fail "$name: data damaged after remount"
}

run_fill "one large file" '
with open("big", "wb") as f:
    while True:
        f.write(b"x" * (1 << 20))
        f.flush()
        os.fsync(f.fileno())'

run_fill "many small files" '
i = 0
while True:
    with open("s%06d" % i, "wb") as f:
        f.write(os.urandom(3000))
    i += 1'

run_fill "many directories with long names" '
i = 0
while True:
    os.mkdir(("d%06d" % i) + "x" * 240)
    i += 1'

run_fill "xattrs" '
i = 0
while True:
    fn = "x%05d" % i
    open(fn, "w").close()
    for j in range(8):
        os.setxattr(fn, "user.a%d" % j, os.urandom(1500))
    i += 1'

# a replace that fails for want of space leaves the value it would have
# replaced (stress-ng's xattr stressor reads it back)
run_fill "xattr replace on a full filesystem" '
vals = {}
for i in range(300):
    fn = "r%03d" % i
    open(fn, "w").close()
    vals[fn] = os.urandom(1000)
    os.setxattr(fn, "user.v", vals[fn])
try:
    with open("big", "wb") as f:
        while True:
            f.write(b"x" * (1 << 20))
            f.flush()
            os.fsync(f.fileno())
except OSError as e:
    if e.errno != errno.ENOSPC:
        raise
for fn in sorted(vals):
    new = os.urandom(3000)
    try:
        os.setxattr(fn, "user.v", new, os.XATTR_REPLACE)
        vals[fn] = new
    except OSError as e:
        if e.errno == errno.ENOSPC and os.getxattr(fn, "user.v") != vals[fn]:
            print("%s: replace failed with ENOSPC but the value changed" % fn,
                  file=sys.stderr)
            sys.exit(1)
        raise
for fn in sorted(vals):
    if os.getxattr(fn, "user.v") != vals[fn]:
        print("%s: value differs from the last replace" % fn, file=sys.stderr)
        sys.exit(1)'

run_fill "fallocate" '
i = 0
while True:
    fd = os.open("fa%d" % i, os.O_CREAT | os.O_WRONLY, 0o644)
    os.posix_fallocate(fd, 0, 4 << 20)
    os.close(fd)
    i += 1'

run_fill "inline files" '
i = 0
while True:
    with open("i%06d" % i, "wb") as f:
        f.write(os.urandom(1500))
    i += 1'

log "pattern: 8 writers at once"
mkdir -p "$MNT/par"
pids=()
for w in 1 2 3 4 5 6 7 8; do
	(cd "$MNT/par" && python3 - "$w" <<'EOF') &
import errno, os, sys
w = sys.argv[1]
i = 0
try:
    while True:
        with open("w%s_%d" % (w, i), "wb") as f:
            f.write(os.urandom(200000))
        i += 1
except OSError as e:
    sys.exit(0 if e.errno == errno.ENOSPC else 1)
EOF
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "parallel writer: error other than ENOSPC"; done
kill -0 "$DAEMON_PID" || fail "parallel: daemon died"
rm -rf "$MNT/par"
head -c 8000000 /dev/zero >"$MNT/after" || fail "parallel: cannot write after freeing"
rm -f "$MNT/after"
[ "$(sha256sum <"$MNT/keep" | cut -d' ' -f1)" = "$REF_SUM" ] || fail "parallel: data damaged"

# df is honest: what it reports free can be written (within 10% + 2 MiB)
python3 -c 'import os,sys; os.fsync(os.open(sys.argv[1], os.O_RDONLY))' "$MNT/keep" ||
	fail "fsync before the df check"
avail=$(df -B1 --output=avail "$MNT" | tail -n 1 | tr -d ' ')
written=$(python3 - "$MNT/dfcheck" <<'EOF'
import errno, os, sys
# with the kernel's writeback cache a full filesystem shows at fsync (or
# close), not at write(2): count only what an fsync confirmed
n = synced = 0
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
buf = b"\0" * (1 << 20)
try:
    while True:
        n += os.write(fd, buf)
        if n % (4 << 20) == 0:
            os.fsync(fd)
            synced = n
except OSError as e:
    if e.errno != errno.ENOSPC:
        raise
try:
    os.close(fd)
except OSError as e:
    if e.errno != errno.ENOSPC:
        raise
print(synced)
EOF
) || fail "df check: write failed"
rm -f "$MNT/dfcheck"
log "df said $avail bytes available, $written bytes could be written"
python3 -c "import sys; a,w=int(sys.argv[1]),int(sys.argv[2]); sys.exit(0 if w >= a*0.9 - (2<<20) else 1)" \
	"$avail" "$written" || fail "df reported $avail available but only $written could be written"

fs_umount
check_fsck

# df stays steady while a transaction is open: each operation reserves its
# worst case of metadata until the commit, but the sum is capped (a node
# dirtied once is not paid for again).  Before the cap, 1,000 creates took
# ~500 MiB off "available" on a 1 GiB image until the next commit.
fs_mkfs -s 1G
fs_mount -o commit=3600,idle_commit=0
avail0=$(df -B1 --output=avail "$MNT" | tail -n 1 | tr -d ' ')
mkdir "$MNT/many"
python3 -c '
import os, sys
for i in range(1000):
    os.close(os.open("%s/f%d" % (sys.argv[1], i), os.O_CREAT | os.O_WRONLY, 0o644))
' "$MNT/many" || fail "df steadiness: creates failed"
avail1=$(df -B1 --output=avail "$MNT" | tail -n 1 | tr -d ' ')
log "df available before 1,000 creates: $avail0, after (no commit yet): $avail1"
[ "$avail1" -ge $((avail0 - (160 << 20))) ] ||
	fail "df available fell from $avail0 to $avail1 over 1,000 creates"
fs_umount
check_fsck
finish
