#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""latprobe.py - latency of stat(2) and 4 KiB random reads on a mount
(bench/snapshot.sh): alternately, stat of a file of the tree populate()
made (d%04d/f%07d, 1,000 per directory) not looked up before by another
run (--seed 1 takes the files of the even directories, any other seed
those of the odd ones, in the order of one permutation: an idle run
then warms no directory a run beside the work uses; a FUSE daemon keeps
its own cache across drop_caches, the kernel's do not), and a 4 KiB
pread at a random 4 KiB-aligned offset of --big, its page cache dropped
first (POSIX_FADV_DONTNEED) so that the read reaches the filesystem.
Runs for --secs, or until the file --until exists (--ready: a file it
makes when it starts).  Prints JSON: per
operation n, p50, p99, max (microseconds), and with --samples every
latency in the order measured ("samples"), so that two runs can be
compared over their first n operations each: the later operations of a
longer run find more of what they look up cached by the earlier ones."""
import argparse
import json
import os
import random
import time


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--files", type=int, required=True)
    ap.add_argument("--big", required=True)
    ap.add_argument("--secs", type=float, default=0)
    ap.add_argument("--until")
    ap.add_argument("--ready", help="a file made once the probe runs")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--samples", action="store_true")
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    perm = list(range(a.files))
    random.Random(0).shuffle(perm)
    side = 0 if a.seed == 1 else 1
    names = [n for n in perm if (n // 1000) % 2 == side]
    fd = os.open(a.big, os.O_RDONLY)
    blocks = os.fstat(fd).st_size // 4096
    lat = {"stat": [], "read": []}
    end = time.monotonic() + a.secs
    i = 0
    if a.ready:
        open(a.ready, "w").close()
    while True:
        if a.until:
            if os.path.exists(a.until):
                break
        elif time.monotonic() >= end:
            break
        if i < len(names):
            n = names[i]
            p = os.path.join(a.root, "d%04d" % (n // 1000), "f%07d" % n)
            t0 = time.perf_counter()
            os.stat(p)
            lat["stat"].append((time.perf_counter() - t0) * 1e6)
        off = rnd.randrange(blocks) * 4096
        os.posix_fadvise(fd, off, 4096, os.POSIX_FADV_DONTNEED)
        t0 = time.perf_counter()
        os.pread(fd, 4096, off)
        lat["read"].append((time.perf_counter() - t0) * 1e6)
        i += 1
    os.close(fd)
    out = {k: {"n": len(v), "p50": round(pct(v, 50), 1),
               "p99": round(pct(v, 99), 1),
               "max": round(max(v), 1) if v else 0.0}
           for k, v in lat.items()}
    if a.samples:
        for k, v in lat.items():
            out[k]["samples"] = [round(x, 1) for x in v]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
