#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""stress.py - 16 processes at once on one mount, results checked.

Roles (two processes each): writers (own files, rewritten and verified),
appenders with fsync, readers (re-read writers' files: a read sees some
version, whole, never garbage), renamers (rename files around a shared
directory), creators/deleters in a shared directory, directory builders
(mkdir/rmdir trees), xattr setters, truncaters.  Each process runs for
--seconds; at the end every writer's and appender's files are checked
against what the process last wrote.  Exit 0 when everything matched.
"""
import argparse
import errno
import hashlib
import multiprocessing as mp
import os
import random
import sys
import time


def content(tag, ver, size):
    h = hashlib.sha256(("%s/%d" % (tag, ver)).encode()).digest()
    return (h * (size // len(h) + 1))[:size]


def writer(root, wid, deadline, q):
    rnd = random.Random(wid)
    d = os.path.join(root, "w%d" % wid)
    os.makedirs(d, exist_ok=True)
    state = {}
    n = 0
    while time.time() < deadline:
        n += 1
        name = "f%d" % rnd.randrange(20)
        ver = state.get(name, (0, 0))[0] + 1
        size = rnd.choice([0, 100, 3000, 4096, 70000, 300000])
        data = content("%d/%s" % (wid, name), ver, size)
        tmp = os.path.join(d, name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.rename(tmp, os.path.join(d, name))
        state[name] = (ver, size)
        with open(os.path.join(d, name), "rb") as f:
            if f.read() != data:
                q.put("writer %d: %s reads back wrong right after writing" % (wid, name))
                return
    q.put(("writer", wid, state, n))


def appender(root, aid, deadline, q):
    p = os.path.join(root, "append%d" % aid)
    n = 0
    with open(p, "ab") as f:
        while time.time() < deadline:
            f.write(content("a%d" % aid, n, 4096))
            f.flush()
            os.fsync(f.fileno())
            n += 1
    q.put(("appender", aid, n, n))


def reader(root, rid, deadline, q):
    rnd = random.Random(100 + rid)
    bad = 0
    n = 0
    while time.time() < deadline:
        n += 1
        wid = rnd.randrange(2)
        name = "f%d" % rnd.randrange(20)
        p = os.path.join(root, "w%d" % wid, name)
        try:
            with open(p, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            continue
        # some complete version of the file (rename-over is atomic)
        if data:
            ok = False
            for ver in range(1, 100000):
                c = content("%d/%s" % (wid, name), ver, len(data))
                if c == data:
                    ok = True
                    break
                if ver > 2000:
                    break
            if not ok:
                bad += 1
    q.put(("reader", rid, bad, n))


def renamer(root, rid, deadline, q):
    rnd = random.Random(200 + rid)
    d = os.path.join(root, "shared")
    os.makedirs(d, exist_ok=True)
    mine = []
    ops = 0
    while time.time() < deadline:
        ops += 1
        if len(mine) < 30:
            n = "r%d_%d" % (rid, len(mine) + rnd.randrange(1 << 30))
            with open(os.path.join(d, n), "w") as f:
                f.write(n)
            mine.append(n)
        a = rnd.choice(mine)
        b = "r%d_%d" % (rid, rnd.randrange(1 << 30))
        os.rename(os.path.join(d, a), os.path.join(d, b))
        mine[mine.index(a)] = b
    for n in mine:
        if not os.path.exists(os.path.join(d, n)):
            q.put("renamer %d: %s vanished" % (rid, n))
            return
    q.put(("renamer", rid, len(mine), ops))


def churn(root, cid, deadline, q):
    rnd = random.Random(300 + cid)
    d = os.path.join(root, "shared")
    os.makedirs(d, exist_ok=True)
    n = 0
    while time.time() < deadline:
        name = os.path.join(d, "c%d_%d" % (cid, rnd.randrange(50)))
        try:
            if rnd.random() < 0.5:
                fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, b"x" * rnd.randrange(5000))
                os.close(fd)
            else:
                os.unlink(name)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOENT):
                raise
        n += 1
        if n % 50 == 0:
            os.listdir(d)
    q.put(("churn", cid, n, n))


def dirs(root, did, deadline, q):
    rnd = random.Random(400 + did)
    base = os.path.join(root, "tree%d" % did)
    n = 0
    while time.time() < deadline:
        n += 1
        p = base
        for lvl in range(rnd.randrange(1, 5)):
            p = os.path.join(p, "d%d" % rnd.randrange(3))
        os.makedirs(p, exist_ok=True)
        if rnd.random() < 0.3:
            for dp, dn, fn in os.walk(base, topdown=False):
                for x in dn:
                    try:
                        os.rmdir(os.path.join(dp, x))
                    except OSError:
                        pass
    q.put(("dirs", did, 0, n))


def xattrs(root, xid, deadline, q):
    rnd = random.Random(500 + xid)
    p = os.path.join(root, "xa%d" % xid)
    open(p, "w").close()
    vals = {}
    n = 0
    while time.time() < deadline:
        n += 1
        k = "user.k%d" % rnd.randrange(10)
        v = os.urandom(rnd.randrange(1, 500))
        os.setxattr(p, k, v)
        vals[k] = v
    for k, v in vals.items():
        if os.getxattr(p, k) != v:
            q.put("xattr %d: %s differs" % (xid, k))
            return
    q.put(("xattrs", xid, len(vals), n))


def truncater(root, tid, deadline, q):
    rnd = random.Random(600 + tid)
    p = os.path.join(root, "tr%d" % tid)
    size = 0
    n = 0
    with open(p, "wb"):
        pass
    while time.time() < deadline:
        n += 1
        size = rnd.randrange(0, 1 << 20)
        os.truncate(p, size)
        with open(p, "r+b") as f:
            f.seek(rnd.randrange(0, size + 1))
            f.write(b"y" * 100)
        size = os.path.getsize(p)
    q.put(("truncater", tid, size, n))


ROLES = [writer, writer, appender, appender, reader, reader, renamer, renamer,
         churn, churn, dirs, dirs, xattrs, xattrs, truncater, truncater]


def run(fn, root, i, deadline, q):
    try:
        fn(root, i, deadline, q)
    except Exception as e:  # report, do not hang the parent
        q.put("%s %d: %r" % (fn.__name__, i, e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--seconds", type=float, default=30)
    args = ap.parse_args()
    deadline = time.time() + args.seconds
    q = mp.Queue()
    counts = {}
    procs = []
    for fn in ROLES:
        counts[fn.__name__] = counts.get(fn.__name__, -1) + 1
        p = mp.Process(target=run, args=(fn, args.root, counts[fn.__name__],
                                          deadline, q))
        p.start()
        procs.append(p)
    results = [q.get(timeout=args.seconds + 300) for _ in procs]
    for p in procs:
        p.join(60)
    errors = [r for r in results if isinstance(r, str)]
    for r in results:
        if isinstance(r, tuple) and r[0] == "reader" and r[2]:
            errors.append("reader %d saw %d torn/garbage files" % (r[1], r[2]))
    # final check of writers and appenders
    for r in results:
        if isinstance(r, tuple) and r[0] == "writer":
            wid, state = r[1], r[2]
            for name, (ver, size) in state.items():
                with open(os.path.join(args.root, "w%d" % wid, name), "rb") as f:
                    if f.read() != content("%d/%s" % (wid, name), ver, size):
                        errors.append("writer %d: %s has wrong content" % (wid, name))
        if isinstance(r, tuple) and r[0] == "appender":
            aid, n = r[1], r[2]
            with open(os.path.join(args.root, "append%d" % aid), "rb") as f:
                data = f.read()
            if data != b"".join(content("a%d" % aid, i, 4096) for i in range(n)):
                errors.append("appender %d: content differs" % aid)
    done = {}
    for r in results:
        if isinstance(r, tuple):
            done[r[0]] = done.get(r[0], 0) + r[3]
    ops = ", ".join("%s %d" % kv for kv in sorted(done.items()))
    print("stress.py: 16 processes for %.0f s, %d operations (%s)" %
          (args.seconds, sum(done.values()), ops))
    if errors:
        print("\n".join(errors[:20]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
