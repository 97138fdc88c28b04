#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""crash.py - kill -9 the arborfs daemon at random instants, check nothing
committed is lost.

Each round mounts the image, runs a worker process that does random file
operations with fsync / fdatasync / rename-over plus directory fsync, and
kills the daemon with SIGKILL after a random delay.  The worker journals, on
the host, what it did *before* and *after* each durable step.  After the
kill: fsck must be clean, and after a remount

  - every file whose fsync returned has exactly the content it was fsynced
    with (files are written once; only rename-over replaces them),
  - a rename-over whose directory fsync returned shows the new content;
    one still in flight shows the old or the new content, whole,
  - each of two log files, appended to in bursts with an fsync after
    every append, starts with every byte its last returned fsync covered
    (l0 grows by whole blocks, so its appends extend its last extent,
    fs/file.c extend_prev; l1 by any size),
  - no name appears that the worker never created.

The image accumulates state across rounds (later rounds verify earlier
rounds' files too).  Seeds are printed; --seed repeats a run.
"""
import argparse
import hashlib
import os
import random
import signal
import subprocess
import sys
import time


def sha(b):
    return hashlib.sha256(b).hexdigest()


def worker(mnt, journal_path, seed, round_no):
    """Runs in a child process until the mount dies under it."""
    rnd = random.Random(seed)
    j = open(journal_path, "a", buffering=1)
    d = os.path.join(mnt, "d")
    os.makedirs(d, exist_ok=True)
    # d's own name is durable once its parent is fsynced
    rfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(rfd)
    os.close(rfd)
    j.write("DIRSYNCED d\n")
    dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    n = 0
    logs = {}
    try:
        for k in range(2):
            name = "l%d" % k
            path = os.path.join(d, name)
            if not os.path.exists(path):
                j.write("CREATE %s\n" % name)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
            with open(path, "rb") as f:
                old = f.read()
            logs[name] = [fd, hashlib.sha256(old), len(old)]
        os.fsync(dfd)
        while True:
            n += 1
            op = rnd.random()
            if op < 0.55:
                # new file, written once, fsynced (or fdatasynced)
                name = "f%d_%d" % (round_no, n)
                size = rnd.choice([0, 1, 100, 2047, 2049, 4096, 5000,
                                   65536, 300000, rnd.randrange(1, 1 << 20)])
                data = rnd.randbytes(size)
                j.write("CREATE %s\n" % name)
                fd = os.open(os.path.join(d, name),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                off = 0
                while off < size:
                    chunk = rnd.choice([4096, 65536, 131072, 1 << 20])
                    off += os.write(fd, data[off:off + chunk])
                if rnd.random() < 0.5:
                    os.fsync(fd)
                else:
                    os.fdatasync(fd)
                os.close(fd)
                # the name itself is durable only after the dir fsync
                os.fsync(dfd)
                j.write("SYNCED %s %s\n" % (name, sha(data)))
            elif op < 0.8:
                # atomic replace: tmp + fsync + rename over + dir fsync
                target = "r%d" % rnd.randrange(4)
                tmp = "t%d_%d" % (round_no, n)
                data = rnd.randbytes(rnd.randrange(0, 200000))
                j.write("CREATE %s\n" % tmp)
                fd = os.open(os.path.join(d, tmp),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                os.write(fd, data)
                os.fsync(fd)
                os.close(fd)
                j.write("RENAME_START %s %s %s\n" % (tmp, target, sha(data)))
                os.rename(os.path.join(d, tmp), os.path.join(d, target))
                os.fsync(dfd)
                j.write("RENAME_DONE %s %s\n" % (target, sha(data)))
            elif op < 0.95 and op >= 0.9:
                # a log: a burst of appends, each fsynced
                name = "l%d" % rnd.randrange(2)
                lg = logs[name]
                # l0 grows by whole blocks (its extent is extended), l1
                # by any size (a partial last block is rewritten instead)
                sizes = [4096, 4096, 8192, 16384]
                if name == "l1":
                    sizes += [1, 100, 5000]
                for _ in range(rnd.randrange(1, 20)):
                    data = rnd.randbytes(rnd.choice(sizes))
                    os.write(lg[0], data)
                    lg[1].update(data)
                    lg[2] += len(data)
                    if rnd.random() < 0.5:
                        os.fsync(lg[0])
                    else:
                        os.fdatasync(lg[0])
                    j.write("APPENDED %s %d %s\n" % (name, lg[2],
                                                      lg[1].hexdigest()))
            elif op < 0.9:
                # unsynced noise: writes that may or may not survive
                name = "u%d_%d" % (round_no, n)
                j.write("CREATE %s\n" % name)
                with open(os.path.join(d, name), "wb") as f:
                    f.write(rnd.randbytes(rnd.randrange(0, 100000)))
                j.write("NOSYNC %s\n" % name)
            else:
                # unlink a file of this round (state becomes "unknown")
                names = [x for x in os.listdir(d) if x.startswith("f%d_" % round_no)]
                if names:
                    victim = rnd.choice(names)
                    j.write("UNLINK %s\n" % victim)
                    os.unlink(os.path.join(d, victim))
            if rnd.random() < 0.05:
                os.sync()
    except OSError:
        pass  # the daemon died under us
    j.close()


def read_journal(path):
    """name -> expected state."""
    state = {}      # name -> ("sha", h) | ("any",) | ("either", old, h)
    created = set()
    if not os.path.exists(path):
        return state, created, False
    dir_synced = False
    for line in open(path):
        p = line.split()
        if not p:
            continue
        if p[0] == "DIRSYNCED":
            dir_synced = True
        elif p[0] == "CREATE":
            created.add(p[1])
            state[p[1]] = ("any",)
        elif p[0] == "SYNCED":
            state[p[1]] = ("sha", p[2])
        elif p[0] == "NOSYNC":
            state[p[1]] = ("any",)
        elif p[0] == "UNLINK":
            state[p[1]] = ("any",)
        elif p[0] == "RENAME_START":
            tmp, target, h = p[1], p[2], p[3]
            created.add(target)
            old = state.get(target, ("absent",))
            state[tmp] = ("any",)
            state[target] = ("either", old, h)
        elif p[0] == "RENAME_DONE":
            state[p[1]] = ("sha", p[2])
        elif p[0] == "APPENDED":
            state[p[1]] = ("prefix", int(p[2]), p[3])
    return state, created, dir_synced


def verify(mnt, journal_path):
    state, created, dir_synced = read_journal(journal_path)
    d = os.path.join(mnt, "d")
    errors = []
    if os.path.isdir(d):
        present = set(os.listdir(d))
    elif dir_synced:
        return ["directory d missing after its parent's fsync returned"]
    else:
        # killed before d was made durable: every name in it may be gone,
        # and the checks below still require what was fsynced
        present = set()
    for name in present - created:
        errors.append("unexpected name %s" % name)
    for name, st in state.items():
        path = os.path.join(d, name)
        exists = name in present
        h = None
        if exists:
            try:
                with open(path, "rb") as f:
                    content = f.read()
            except OSError as e:
                errors.append("%s: cannot be read: %s" % (name, e))
                continue
            h = sha(content)
        if st[0] == "prefix":
            if not exists:
                errors.append("%s: appended log missing" % name)
            elif len(content) < st[1]:
                errors.append("%s: %d bytes, %d were fsynced" %
                              (name, len(content), st[1]))
            elif sha(content[:st[1]]) != st[2]:
                errors.append("%s: the first %d bytes differ from what was "
                              "fsynced" % (name, st[1]))
        elif st[0] == "sha":
            if not exists:
                errors.append("%s: fsynced file missing" % name)
            elif h != st[1]:
                errors.append("%s: content differs from what was fsynced" % name)
        elif st[0] == "either":
            old, new = st[1], st[2]
            ok = exists and h == new
            if old[0] == "absent":
                ok = ok or not exists
            elif old[0] == "sha":
                ok = ok or (exists and h == old[1])
            else:
                ok = True
            if not ok:
                errors.append("%s: rename-over neither old nor new" % name)
    return errors


def mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return any(l.split()[4] == mnt for l in f)


def mount(args, log):
    p = subprocess.Popen([args.daemon, "-f", "-o", "commit=2", args.image,
                          args.mnt], stdout=log, stderr=log)
    for _ in range(200):
        if mounted(args.mnt):
            return p
        if p.poll() is not None:
            raise SystemExit("daemon exited with %d while mounting" % p.returncode)
        time.sleep(0.05)
    p.kill()
    raise SystemExit("mount timed out")


def unmount_dead(mnt):
    for cmd in (["fusermount3", "-u", "-z", mnt], ["umount", "-l", mnt]):
        if not mounted(mnt):
            return
        subprocess.run(cmd, stderr=subprocess.DEVNULL)
    for _ in range(50):
        if not mounted(mnt):
            return
        time.sleep(0.1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--fsck", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--mnt", required=True)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--max-delay", type=float, default=2.0)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    print("crash.py: seed %d (--seed %d to repeat)" % (seed, seed), flush=True)
    rnd = random.Random(seed)
    log = open(args.log, "ab")
    survived = 0
    for r in range(args.rounds):
        p = mount(args, log)
        try:
            errs = verify(args.mnt, args.journal)
            if errs:
                print("round %d: after remount:\n  %s" % (r, "\n  ".join(errs[:20])))
                return 1
            w = os.fork()
            if w == 0:
                try:
                    worker(args.mnt, args.journal, seed * 1000 + r, r)
                finally:
                    os._exit(0)
            time.sleep(rnd.uniform(0.02, args.max_delay))
            p.send_signal(signal.SIGKILL)
            p.wait()
            os.waitpid(w, 0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            unmount_dead(args.mnt)
        fs = subprocess.run([args.fsck, "-n", args.image], capture_output=True,
                            text=True)
        if fs.returncode != 0:
            print("round %d: fsck exit %d after kill:\n%s%s" %
                  (r, fs.returncode, fs.stdout[-3000:], fs.stderr[-2000:]))
            return 1
        survived += 1
    # final check of everything
    p = mount(args, log)
    try:
        errs = verify(args.mnt, args.journal)
    finally:
        subprocess.run(["fusermount3", "-u", args.mnt])
        p.wait()
    if errs:
        print("final verify:\n  %s" % "\n  ".join(errs[:20]))
        return 1
    state, _, _ = read_journal(args.journal)
    nsync = sum(1 for v in state.values() if v[0] == "sha")
    logb = sum(v[1] for v in state.values() if v[0] == "prefix")
    print("crash.py: %d kills survived, fsck clean after each; %d fsynced "
          "files / completed renames verified intact; %d fsynced bytes of "
          "appended logs" % (survived, nsync, logb))
    return 0


if __name__ == "__main__":
    sys.exit(main())
