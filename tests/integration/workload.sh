#!/bin/bash
# workload.sh - real programs on the mount: untar a source tree, build a C
# project with make -j, git, rsync/cp -a; compare everything with the same
# work done on the host, across a remount.
. "$(dirname "$0")/lib.sh" "$@"

command -v tar >/dev/null || skip "tar missing"
command -v gcc >/dev/null || skip "gcc missing"
command -v make >/dev/null || skip "make missing"

fs_mkfs -s 4G
fs_mount -o commit=2
HOST=$TMP/host
mkdir -p "$HOST"

# A source tree to unpack: /usr/include (headers, symlinks, deep dirs).
SRC=/usr/include
[ -d "$SRC" ] || skip "$SRC missing"
log "tar of $SRC"
tar -C "$(dirname "$SRC")" -cf "$TMP/src.tar" "$(basename "$SRC")"
log "untar onto the mount ($(du -sh "$TMP/src.tar" | cut -f1))"
tar -C "$MNT" -xpf "$TMP/src.tar" || fail "untar on the mount"
tar -C "$HOST" -xpf "$TMP/src.tar"
diff -r --no-dereference "$HOST/include" "$MNT/include" >/dev/null || fail "untarred trees differ"
manifest "$HOST/include" >"$TMP/inc.host"
manifest "$MNT/include" >"$TMP/inc.mnt"
same_manifest "$TMP/inc.host" "$TMP/inc.mnt"

log "build a C project with make -j"
make_project() {
	local d=$1 i
	mkdir -p "$d/src"
	for i in $(seq 1 40); do
		cat >"$d/src/mod$i.c" <<EOF
#include <stdint.h>
#include <string.h>
#include <zlib.h>
uint32_t mod$i(const char *s)
{
	uint32_t h = $i;
	while (*s)
		h = h * 31 + (unsigned char)*s++;
	return h ^ (uint32_t)crc32(0, (const unsigned char *)"mod$i", $((${#i} + 3)));
}
EOF
	done
	{
		echo '#include <stdio.h>'
		echo '#include <stdint.h>'
		for i in $(seq 1 40); do echo "uint32_t mod$i(const char *);"; done
		echo 'int main(int argc, char **argv) {'
		echo '	uint32_t h = 0;'
		echo '	const char *s = argc > 1 ? argv[1] : "arborfs";'
		for i in $(seq 1 40); do echo "	h ^= mod$i(s);"; done
		echo '	printf("%08x\n", h);'
		echo '	return 0;'
		echo '}'
	} >"$d/src/main.c"
	cat >"$d/Makefile" <<'EOF'
SRCS := $(wildcard src/*.c)
OBJS := $(SRCS:src/%.c=obj/%.o)
prog: $(OBJS)
	$(CC) -o $@ $(OBJS) -lz
obj/%.o: src/%.c | obj
	$(CC) -O2 -g -Wall -c -o $@ $<
obj:
	mkdir -p obj
clean:
	rm -rf obj prog
EOF
}
if [ -e /usr/include/zlib.h ]; then
	make_project "$MNT/proj"
	make_project "$HOST/proj"
	make -s -C "$MNT/proj" -j4 >/dev/null || fail "make on the mount"
	make -s -C "$HOST/proj" -j4 >/dev/null
	[ "$("$MNT/proj/prog" test)" = "$("$HOST/proj/prog" test)" ] || fail "built program output"
	# rebuild after touching a source: make sees the new mtime
	sleep 1
	touch "$MNT/proj/src/mod7.c"
	[ -n "$(make -C "$MNT/proj" -n)" ] || fail "make does not see the touched source"
	make -s -C "$MNT/proj" >/dev/null || fail "incremental make"
	make -s -C "$MNT/proj" clean
	make -s -C "$HOST/proj" clean
else
	log "zlib.h missing: C project skipped"
fi

if command -v git >/dev/null; then
	log "git"
	git_work() {
		local d=$1
		mkdir -p "$d/repo"
		cp -a "$HOST/include/linux" "$d/repo/" 2>/dev/null || cp -a "$HOST/include/stdio.h" "$d/repo/"
		cd "$d/repo"
		git init -q -b main .
		git -c user.name=t -c user.email=t@t add -A
		GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z' \
			git -c user.name=t -c user.email=t@t commit -q -m first
		echo change >>"$(git ls-files | head -n 1)"
		git rm -q "$(git ls-files | tail -n 1)"
		GIT_AUTHOR_DATE='2020-01-02T00:00:00Z' GIT_COMMITTER_DATE='2020-01-02T00:00:00Z' \
			git -c user.name=t -c user.email=t@t commit -q -am second
		git gc -q
		git fsck --no-progress >/dev/null
		cd /
	}
	git_work "$MNT"
	git_work "$HOST"
	[ "$(git -C "$MNT/repo" rev-parse HEAD)" = "$(git -C "$HOST/repo" rev-parse HEAD)" ] ||
		fail "git commit ids differ"
	[ -z "$(git -C "$MNT/repo" status --porcelain)" ] || fail "git status not clean on the mount"
	diff <(git -C "$MNT/repo" ls-files -s) <(git -C "$HOST/repo" ls-files -s) >/dev/null ||
		fail "git ls-files -s differs"
else
	log "git missing: skipped"
fi

log "copy with hard links (rsync -aH or cp -a)"
mkdir -p "$HOST/links"
for i in 1 2 3; do head -c $((i * 70000)) /dev/urandom >"$HOST/links/f$i"; done
ln "$HOST/links/f1" "$HOST/links/f1-again"
ln -s f2 "$HOST/links/to-f2"
setfattr -n user.tag -v yes "$HOST/links/f3" 2>/dev/null || true
if command -v rsync >/dev/null; then
	rsync -aHX "$HOST/links/" "$MNT/links/" || fail "rsync -aHX to the mount"
else
	cp -a "$HOST/links" "$MNT/links" || fail "cp -a to the mount"
fi
# the top directory's mtime depends on the order rsync sets times and
# makes hard links in: leave it out
manifest "$HOST/links" | grep -v '^\. ' >"$TMP/links.host"
manifest "$MNT/links" | grep -v '^\. ' >"$TMP/links.mnt"
same_manifest "$TMP/links.host" "$TMP/links.mnt"
cp -a "$MNT/include" "$MNT/include-copy" || fail "cp -a on the mount"
MANIFEST_NO_NLINK=1 manifest "$MNT/include" >"$TMP/a"
MANIFEST_NO_NLINK=1 manifest "$MNT/include-copy" >"$TMP/b"
# cp -a copies the (minimal) access ACL of each file: the mode must follow
same_manifest_soft "$TMP/a" "$TMP/b"
rm -rf "$MNT/include-copy" || fail "rm -rf"
[ ! -e "$MNT/include-copy" ] || fail "rm -rf left something"

manifest "$MNT" >"$TMP/all.1"
log "remount"
fs_remount
manifest "$MNT" >"$TMP/all.2"
same_manifest "$TMP/all.1" "$TMP/all.2"
if [ -e "$MNT/proj/Makefile" ]; then
	make -s -C "$MNT/proj" -j4 >/dev/null || fail "make after remount"
	"$MNT/proj/prog" >/dev/null || fail "program built after remount"
fi
[ -d "$MNT/repo" ] && { git -C "$MNT/repo" fsck --no-progress >/dev/null || fail "git fsck after remount"; }
fs_umount
check_fsck
finish
