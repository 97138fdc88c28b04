#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""snapstress.py - many snapshots of a live tree, each checked against what
its source durably held when the snapshot was asked for.

  run          writer processes (seeded: create, overwrite, append,
               truncate, rename, unlink, mkdir, fsync or close) change
               SV/w<N>/ while this process takes snapshots of SV (read-only
               and writable; now and then a snapshot of a writable
               snapshot) into SNAPS/; the snapshots and the instants at
               which each call began and ended go to STATE (JSON)
  verify       every snapshot holds exactly what its source held, after
               the writers' logs, for every file whose last change had
               returned (fsync, close, truncate, rename, unlink) before
               the call began and whose next change began after it
               ended; no unknown names; no file anywhere holds a NUL byte
               (writers never write one: a zero tail or a size beyond
               the data shows as one)
  independence writes into every writable snapshot (overwrite of shared
               extents, append, truncate, rename, unlink, create,
               xattr) are not seen in the source or in other snapshots;
               then the same changes to the source are not seen in any
               snapshot
  delete       deletes every snapshot with `arbor subvolume delete`, in a
               seeded random order, one or several per call, then
               `arbor subvolume sync`
  usage        prints the filesystem's usage as JSON (`arbor filesystem
               sync` first): data, metadata, and the bytes SV's files
               hold (sum of st_blocks)

The writers' logs (one per writer, on the host) hold three kinds of line,
each with CLOCK_MONOTONIC, the clock of every process on the machine:
  M t path            a change of path is about to begin
  D t path size sha   the change has returned: path now holds these bytes
  A t path            the change has returned: path does not exist
A snapshot taken between t0 and t1 (the arbor call) must show path as its
last D/A line before t0 says, when that line's t < t0 and the next M line
of path, if any, has t > t1.  Snapshot content is read after the writers
stop (snapshots do not change), so verification costs no run time.
"""
import argparse
import hashlib
import json
import multiprocessing as mp
import os
import random
import re
import subprocess
import sys
import time


def sha(b):
    return hashlib.sha256(b).hexdigest()


def nonzero_bytes(rnd, n):
    """n random bytes, none of them NUL."""
    b = bytearray(rnd.randbytes(n))
    for i in range(n):
        if b[i] == 0:
            b[i] = 1 + (i % 255)
    return bytes(b)


# ---- writers ------------------------------------------------------------

def writer(sv, wid, seed, stop, logpath):
    rnd = random.Random(seed)
    base = "w%d" % wid
    os.makedirs(os.path.join(sv, base), exist_ok=True)
    dirs = [base]
    files = {}  # relpath -> bytes (what it holds once its change returned)
    log = open(logpath, "w", buffering=1)
    n = 0

    def M(p):
        log.write("M %.9f %s\n" % (time.monotonic(), p))

    def D(p):
        d = files[p]
        log.write("D %.9f %s %d %s\n" % (time.monotonic(), p, len(d), sha(d)))

    def A(p):
        log.write("A %.9f %s\n" % (time.monotonic(), p))

    def size():
        r = rnd.random()
        if r < 0.3:
            return rnd.randrange(0, 200)
        if r < 0.8:
            return rnd.randrange(200, 20000)
        if r < 0.97:
            return rnd.randrange(20000, 200000)
        return rnd.randrange(200000, 1 << 20)

    def finish(fd):
        """fsync then close, or only close (both make the data count)"""
        if rnd.random() < 0.6:
            os.fsync(fd) if rnd.random() < 0.7 else os.fdatasync(fd)
        os.close(fd)

    def write_all(fd, data, off=None):
        # in pieces, sometimes with pauses: the file is in flight (M
        # without D) across some snapshot calls
        pos = 0
        slow = rnd.random() < 0.1
        while pos < len(data) or pos == 0:
            chunk = data[pos:pos + rnd.choice([4096, 16384, 65536, 1 << 20])]
            if not chunk:
                break
            if off is None:
                w = os.write(fd, chunk)
            else:
                w = os.pwrite(fd, chunk, off + pos)
            pos += w
            if slow:
                time.sleep(0.005)

    while not stop.is_set():
        n += 1
        op = rnd.random()
        names = sorted(files)
        if op < 0.25 or len(names) < 4:
            # a new file
            p = "%s/f%d" % (rnd.choice(dirs), n)
            data = nonzero_bytes(rnd, size())
            M(p)
            fd = os.open(os.path.join(sv, p), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            write_all(fd, data)
            finish(fd)
            files[p] = data
            D(p)
        elif op < 0.40:
            # overwrite in place, possibly past the end
            p = rnd.choice(names)
            old = files[p]
            off = rnd.randrange(0, len(old) + 1)
            data = nonzero_bytes(rnd, rnd.randrange(1, 70000))
            M(p)
            fd = os.open(os.path.join(sv, p), os.O_WRONLY)
            write_all(fd, data, off)
            finish(fd)
            files[p] = old[:off] + data + old[off + len(data):]
            D(p)
        elif op < 0.55:
            # append
            p = rnd.choice(names)
            data = nonzero_bytes(rnd, rnd.randrange(1, 50000))
            M(p)
            fd = os.open(os.path.join(sv, p), os.O_WRONLY | os.O_APPEND)
            write_all(fd, data)
            finish(fd)
            files[p] = files[p] + data
            D(p)
        elif op < 0.65:
            # truncate down (never up: that would make zeros)
            p = rnd.choice(names)
            ln = rnd.randrange(0, len(files[p]) + 1)
            M(p)
            if rnd.random() < 0.5:
                os.truncate(os.path.join(sv, p), ln)
            else:
                fd = os.open(os.path.join(sv, p), os.O_WRONLY)
                os.ftruncate(fd, ln)
                finish(fd)
            files[p] = files[p][:ln]
            D(p)
        elif op < 0.73:
            # rename, over an existing file or to a new name
            src = rnd.choice(names)
            if rnd.random() < 0.5:
                dst = rnd.choice(names)
            else:
                dst = "%s/r%d" % (rnd.choice(dirs), n)
            if dst == src:
                continue
            M(src)
            M(dst)
            os.rename(os.path.join(sv, src), os.path.join(sv, dst))
            files[dst] = files.pop(src)
            A(src)
            D(dst)
        elif op < 0.80:
            p = rnd.choice(names)
            M(p)
            os.unlink(os.path.join(sv, p))
            del files[p]
            A(p)
        elif op < 0.83 and len(dirs) < 6:
            d = "%s/d%d" % (base, n)
            os.mkdir(os.path.join(sv, d))
            dirs.append(d)
        elif op < 0.93:
            # rewrite whole (O_TRUNC), the editor's way
            p = rnd.choice(names)
            data = nonzero_bytes(rnd, size())
            M(p)
            fd = os.open(os.path.join(sv, p), os.O_WRONLY | os.O_TRUNC)
            write_all(fd, data)
            finish(fd)
            files[p] = data
            D(p)
        else:
            # write, fsync, then keep writing to the same open file
            p = rnd.choice(names)
            M(p)
            fd = os.open(os.path.join(sv, p), os.O_WRONLY | os.O_APPEND)
            for _ in range(rnd.randrange(1, 4)):
                data = nonzero_bytes(rnd, rnd.randrange(1, 30000))
                write_all(fd, data)
                files[p] = files[p] + data
                os.fsync(fd)
            os.close(fd)
            D(p)
        # keep the tree small enough to read in every snapshot
        while len(files) > 40:
            p = sorted(files)[rnd.randrange(len(files))]
            M(p)
            os.unlink(os.path.join(sv, p))
            del files[p]
            A(p)
        total = sum(len(v) for v in files.values())
        while total > (6 << 20):
            p = max(files, key=lambda k: len(files[k]))
            M(p)
            os.truncate(os.path.join(sv, p), 0)
            total -= len(files[p])
            files[p] = b""
            D(p)
    log.close()


def writer_main(sv, wid, seed, stop, logpath):
    try:
        writer(sv, wid, seed, stop, logpath)
    except Exception as e:  # reported by the exit code
        print("writer %d: %r" % (wid, e), file=sys.stderr, flush=True)
        os._exit(1)
    os._exit(0)


def read_logs(logdir, nwriters):
    """path -> list of (t, kind, size, sha), in order"""
    ev = {}
    for w in range(nwriters):
        with open(os.path.join(logdir, "w%d.log" % w)) as f:
            for line in f:
                p = line.split()
                if len(p) < 3:
                    continue  # a torn last line (none expected)
                t = float(p[1])
                if p[0] == "D":
                    ev.setdefault(p[2], []).append((t, "D", int(p[3]), p[4]))
                else:
                    ev.setdefault(p[2], []).append((t, p[0], None, None))
    return ev


def expected(ev, t0, t1):
    """path -> (size, sha) | None (absent), for the paths known at [t0, t1]"""
    out = {}
    for p, lst in ev.items():
        last = None
        nxt = None
        for e in lst:
            if e[0] < t0:
                last = e
            else:
                nxt = e
                break
        if last is None:
            # not yet begun: absent unless a change began before t1
            if nxt is None or nxt[0] > t1:
                out[p] = None
            continue
        if last[1] == "M":
            continue  # in flight at t0
        if nxt is not None and nxt[0] <= t1:
            continue  # changed during the call
        out[p] = (last[2], last[3]) if last[1] == "D" else None
    return out


# ---- helpers ------------------------------------------------------------

def arbor(args, cmd, check=True):
    r = subprocess.run([args.arbor] + cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit("arbor %s: exit %d: %s%s" % (" ".join(cmd), r.returncode,
                                                      r.stdout, r.stderr))
    return r


def tree_files(root):
    """relpath -> full path of every regular file below root"""
    out = {}
    for dp, dns, fns in os.walk(root):
        dns.sort()
        for fn in fns:
            full = os.path.join(dp, fn)
            out[os.path.relpath(full, root)] = full
    return out


def manifest(root):
    m = {}
    for rel, full in tree_files(root).items():
        with open(full, "rb") as f:
            d = f.read()
        try:
            xa = sorted((k, os.getxattr(full, k)) for k in os.listxattr(full))
        except OSError:
            xa = "?"
        m[rel] = (len(d), sha(d), repr(xa))
    for dp, dns, fns in os.walk(root):
        for dn in dns:
            m[os.path.relpath(os.path.join(dp, dn), root) + "/"] = "dir"
    return m


def diff_manifest(a, b, limit=8):
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            out.append("%s: %s -> %s" % (k, a.get(k), b.get(k)))
            if len(out) >= limit:
                break
    return out


# ---- run ----------------------------------------------------------------

def do_run(args):
    rnd = random.Random(args.seed)
    sv = os.path.join(args.root, args.sv)
    snaps = os.path.join(args.root, args.snaps)
    os.makedirs(snaps, exist_ok=True)
    os.makedirs(args.logdir, exist_ok=True)
    stop = mp.Event()
    procs = []
    for w in range(args.writers):
        p = mp.Process(target=writer_main,
                       args=(sv, w, args.seed * 100 + w, stop,
                             os.path.join(args.logdir, "w%d.log" % w)))
        p.start()
        procs.append(p)
    state = {"seed": args.seed, "writers": args.writers, "snapshots": []}
    failed = None
    try:
        time.sleep(0.5)  # let the writers make a tree
        for i in range(args.snapshots):
            for p in procs:
                if p.exitcode is not None:
                    raise SystemExit("writer %s ended early (exit %s)" % (p.name, p.exitcode))
            name = "s%03d" % i
            ro = rnd.random() < 0.5
            # now and then a snapshot of a writable snapshot (not yet
            # written to: it holds what its own source held)
            rw = [s for s in state["snapshots"] if not s["ro"]]
            src = args.sv
            of = None
            if rw and rnd.random() < 0.1:
                s = rnd.choice(rw)
                src, of = os.path.join(args.snaps, s["name"]), s["name"]
            cmd = ["subvolume", "snapshot"] + (["-r"] if ro else []) + \
                  [os.path.join(args.root, src), os.path.join(snaps, name)]
            t0 = time.monotonic()
            r = arbor(args, cmd, check=False)
            t1 = time.monotonic()
            if r.returncode != 0:
                failed = "snapshot %s: exit %d: %s%s" % (name, r.returncode, r.stdout, r.stderr)
                break
            state["snapshots"].append({"name": name, "ro": ro, "t0": t0, "t1": t1,
                                       "of": of})
            time.sleep(rnd.uniform(0, args.interval))
    finally:
        stop.set()
        bad = []
        for p in procs:
            p.join(120)
            if p.exitcode != 0:
                bad.append("%s exit %s" % (p.name, p.exitcode))
    with open(args.state, "w") as f:
        json.dump(state, f)
    if failed:
        raise SystemExit(failed)
    if bad:
        raise SystemExit("writers failed: " + ", ".join(bad))
    durs = [s["t1"] - s["t0"] for s in state["snapshots"]]
    ev = read_logs(args.logdir, args.writers)
    nd = sum(1 for lst in ev.values() for e in lst if e[1] != "M")
    print("snapstress: %d snapshots (%d read-only, %d of snapshots) while %d "
          "writers made %d changes; snapshot call %.0f ms mean, %.0f ms max" %
          (len(durs), sum(s["ro"] for s in state["snapshots"]),
           sum(1 for s in state["snapshots"] if s["of"]), args.writers, nd,
           1000 * sum(durs) / max(1, len(durs)), 1000 * max(durs or [0])))


# ---- verify -------------------------------------------------------------

def do_verify(args):
    state = json.load(open(args.state))
    ev = read_logs(args.logdir, state["writers"])
    byname = {s["name"]: s for s in state["snapshots"]}
    errors = []
    checked = files = nul = 0
    for s in state["snapshots"]:
        # a snapshot of a snapshot holds what the first one held
        base = s
        while base["of"]:
            base = byname[base["of"]]
        exp = expected(ev, base["t0"], base["t1"])
        root = os.path.join(args.root, args.snaps, s["name"])
        have = tree_files(root)
        for rel, full in have.items():
            files += 1
            if rel not in ev:
                errors.append("%s: unknown file %s" % (s["name"], rel))
                continue
            with open(full, "rb") as f:
                d = f.read()
            st = os.stat(full)
            if st.st_size != len(d):
                errors.append("%s/%s: st_size %d, read %d bytes" %
                              (s["name"], rel, st.st_size, len(d)))
            z = d.find(b"\0")
            if z >= 0:
                nul += 1
                errors.append("%s/%s: NUL byte at %d of %d (a zero tail or a "
                              "size beyond the data)" % (s["name"], rel, z, len(d)))
            e = exp.get(rel, "?")
            if e == "?":
                continue
            checked += 1
            if e is None:
                errors.append("%s/%s: exists; it was deleted (or not yet "
                              "created) when the snapshot was asked for" % (s["name"], rel))
            elif (len(d), sha(d)) != e:
                errors.append("%s/%s: %d bytes %s, want %d bytes %s (fsynced "
                              "or closed before the snapshot)" %
                              (s["name"], rel, len(d), sha(d)[:12], e[0], e[1][:12]))
        for rel, e in exp.items():
            if e is not None and rel not in have:
                checked += 1
                errors.append("%s/%s: missing; %d bytes were fsynced or closed "
                              "before the snapshot" % (s["name"], rel, e[0]))
        if len(errors) > 40:
            break
    if errors:
        print("snapstress verify: %d problem(s):\n  %s" % (len(errors), "\n  ".join(errors[:40])))
        return 1
    print("snapstress verify: %d snapshots, %d files read, %d (file, snapshot) "
          "pairs with a determined state all exact, no NUL byte anywhere" %
          (len(state["snapshots"]), files, checked))
    return 0


# ---- independence -------------------------------------------------------

def mutate(root, rnd, tag):
    """change a tree in every way that shares nothing with its clones"""
    fl = sorted(tree_files(root).items())
    if not fl:
        return
    for rel, full in rnd.sample(fl, min(len(fl), 12)):
        how = rnd.randrange(6)
        try:
            size = os.path.getsize(full)
            if how == 0:  # overwrite a shared extent in place
                with open(full, "r+b") as f:
                    f.seek(rnd.randrange(0, size + 1))
                    f.write(tag * 5000)
            elif how == 1:  # append (would grow a shared extent)
                with open(full, "ab") as f:
                    f.write(tag * rnd.randrange(1, 9000))
            elif how == 2:
                os.truncate(full, size // 2)
            elif how == 3:
                os.rename(full, full + "." + tag.decode())
            elif how == 4:
                os.unlink(full)
            else:
                os.setxattr(full, "user.snapstress", tag)
        except FileNotFoundError:
            pass
    with open(os.path.join(root, "new." + tag.decode()), "wb") as f:
        f.write(tag * 3000)
    os.mkdir(os.path.join(root, "dir." + tag.decode()))


def do_independence(args):
    rnd = random.Random(args.seed + 1)
    state = json.load(open(args.state))
    sv = os.path.join(args.root, args.sv)
    roots = {s["name"]: os.path.join(args.root, args.snaps, s["name"])
             for s in state["snapshots"]}
    rw = [s["name"] for s in state["snapshots"] if not s["ro"]]
    m0 = {n: manifest(r) for n, r in roots.items()}
    src0 = manifest(sv)
    errors = []
    for n in rw:
        mutate(roots[n], rnd, b"S")
    os.sync()
    d = diff_manifest(src0, manifest(sv))
    if d:
        errors.append("writes into writable snapshots seen in the source: " + "; ".join(d))
    m1 = {}
    for n, r in roots.items():
        m1[n] = manifest(r)
        if n not in rw and m1[n] != m0[n]:
            errors.append("read-only %s changed: %s" % (n, "; ".join(diff_manifest(m0[n], m1[n]))))
        if n in rw and m1[n] == m0[n]:
            errors.append("writable %s: the writes into it are not there" % n)
    mutate(sv, rnd, b"O")
    os.sync()
    src1 = manifest(sv)
    if src1 == src0:
        errors.append("the writes into the source are not there")
    for n, r in roots.items():
        d = diff_manifest(m1[n], manifest(r))
        if d:
            errors.append("writes into the source seen in %s: %s" % (n, "; ".join(d)))
    if errors:
        print("snapstress independence: %d problem(s):\n  %s" %
              (len(errors), "\n  ".join(errors[:30])))
        return 1
    print("snapstress independence: %d writable snapshots changed, source "
          "unchanged; source changed, %d snapshots unchanged" % (len(rw), len(roots)))
    return 0


# ---- delete, usage ------------------------------------------------------

def do_delete(args):
    rnd = random.Random(args.seed + 2)
    state = json.load(open(args.state))
    names = [s["name"] for s in state["snapshots"]]
    # a snapshot of a snapshot is a subvolume of its own: order is free
    rnd.shuffle(names)
    calls = 0
    while names:
        k = min(len(names), rnd.choice([1, 1, 1, 2, 5]))
        batch, names = names[:k], names[k:]
        cmd = ["subvolume", "delete"] + (["--wait"] if rnd.random() < 0.1 else []) + \
              [os.path.join(args.root, args.snaps, n) for n in batch]
        arbor(args, cmd)
        calls += 1
        for n in batch:
            if os.path.lexists(os.path.join(args.root, args.snaps, n)):
                raise SystemExit("%s still seen after its delete returned" % n)
    t = time.monotonic()
    arbor(args, ["subvolume", "sync", args.root])
    dt = time.monotonic() - t
    j = json.loads(arbor(args, ["subvolume", "list", "--json", args.root]).stdout)
    left = [s for s in j["subvolumes"] if s["deleted"] or
            (s["path"] or "").startswith(args.snaps + "/")]
    if left:
        raise SystemExit("after subvolume sync, still listed: %s" % left)
    print("snapstress delete: %d snapshots deleted in %d calls (random order); "
          "subvolume sync took %.2f s" % (len(state["snapshots"]), calls, dt))
    return 0


def do_usage(args):
    arbor(args, ["filesystem", "sync", args.root])
    u = json.loads(arbor(args, ["filesystem", "usage", "--json", args.root]).stdout)
    blocks = 0
    if args.sv:
        for full in tree_files(os.path.join(args.root, args.sv)).values():
            blocks += os.lstat(full).st_blocks * 512
    print(json.dumps({"data": u["data"], "metadata": u["metadata"],
                      "pinned": u["pinned"], "sv_blocks": blocks}))
    return 0


def do_accounting(args):
    """On the unmounted image: the space in use is what its trees reach.
    Data: the distinct disk extents the file extent items of every tree
    name, whole (an extent part of which is still referenced stays whole,
    as in btrfs, so st_blocks is no measure).  Metadata: the nodes fsck
    reaches, times the metadata copies."""
    def run(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("%s: exit %d: %s%s" % (" ".join(cmd), r.returncode,
                                                    r.stdout[-2000:], r.stderr[-2000:]))
        return r.stdout
    use = {}
    for line in run([args.arbor, "usage", "--image", args.image]).splitlines():
        p = line.split()
        if len(p) >= 2 and p[1].isdigit():
            use[p[0]] = int(p[1])
    show = run([args.arbor, "filesystem", "show", "--image", args.image])
    node = int(re.search(r"node size\s+(\d+)", show).group(1))
    copies = 2 if re.search(r"metadata\s+dup", show) else 1
    extents = set()
    for m in re.finditer(r"EXTENT_DATA \d+\).* (?:reg|prealloc) disk (\d+)\+(\d+)",
                         run([args.arbor, "dump", "--image", args.image])):
        if int(m.group(1)):
            extents.add((int(m.group(1)), int(m.group(2))))
    data = sum(n for _, n in extents)
    nodes = int(re.search(r"(\d+) nodes", run([args.fsck, "-n", args.image])).group(1))
    errors = []
    if use["data"] != data:
        errors.append("data in use %d B, the trees' extents hold %d B (%+d KiB)" %
                      (use["data"], data, (use["data"] - data) >> 10))
    if use["metadata"] != nodes * node * copies:
        errors.append("metadata in use %d B, fsck reaches %d nodes of %d B, %d "
                      "copies: %d B (%+d nodes)" %
                      (use["metadata"], nodes, node, copies, nodes * node * copies,
                       (use["metadata"] - nodes * node * copies) // (node * copies)))
    print("snapstress accounting: data %d B in %d extents, metadata %d nodes: %s" %
          (data, len(extents), nodes, "; ".join(errors) or "the usage says the same"))
    return 1 if errors else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["run", "verify", "independence", "delete", "usage",
                                    "accounting"])
    ap.add_argument("--root")
    ap.add_argument("--image")
    ap.add_argument("--fsck")
    ap.add_argument("--arbor", required=True)
    ap.add_argument("--sv", default="sv")
    ap.add_argument("--snaps", default="snaps")
    ap.add_argument("--state")
    ap.add_argument("--logdir")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--snapshots", type=int, default=30)
    ap.add_argument("--interval", type=float, default=0.2)
    args = ap.parse_args()
    return {"run": do_run, "verify": do_verify, "independence": do_independence,
            "delete": do_delete, "usage": do_usage,
            "accounting": do_accounting}[args.cmd](args) or 0


if __name__ == "__main__":
    sys.exit(main())
