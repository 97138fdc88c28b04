#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""snapcrash.py - kill -9 the arborfs daemon while snapshots are made,
deleted and cleaned; check that nothing reported done is lost and nothing
half-made is seen.

Rounds of three kinds, in a seeded order (each kind a third of them):

  create  a writer fills the subvolume "noise" with unsynced data (the
          snapshot's flush has work) while this process changes a few
          files of "sv" (write + fsync), notes what sv holds, and asks for
          a snapshot of it (read-only or writable), again and again
  delete  `arbor subvolume delete` of snapshots, one or several per call
  clean   writable snapshots made, given exclusive data and nodes (their
          files rewritten and chmod'ed), deleted, then `arbor subvolume
          sync` waits for the cleaner

and after them, rounds of one more kind:

  big     a subvolume of many files (--big-files) made, synced and
          deleted; once the cleaner (mounted with a small clean_batch)
          has dropped part of it, a commit, then SIGKILL at a random
          instant: the image holds a tree partly dropped, which fsck
          must find consistent and the next mount must finish

The daemon gets SIGKILL at a seeded random instant of the round.  Then:
fsck.arborfs -n exits 0; the image mounts again; every snapshot whose
`arbor` call had returned holds exactly what sv held when it was asked
for (and its read-only flag); one whose call was cut off exists complete
or not at all; a deleted one is gone; no subvolume appears that nobody
made; `arbor subvolume sync` returns (the cleaner resumes) and then `list`
shows no deleted subvolume left.  At the end every subvolume is deleted
and the usage is that of the empty filesystem again.
"""
import argparse
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Died(Exception):
    """the daemon is gone (an operation failed after the kill)"""


class Crash:
    def __init__(self, args):
        self.a = args
        self.rnd = random.Random(args.seed)
        self.mnt = args.mnt
        self.sv = os.path.join(args.mnt, "sv")
        self.snapdir = os.path.join(args.mnt, "snaps")
        self.log = open(args.log, "ab")
        self.daemon = None
        # name -> {"exp": {rel: sha}, "ro": bool, "st": created | maybe |
        #          deleted | maybe_deleted | gone, "touched": bool}
        self.snaps = {}
        self.model = {}  # sv: rel -> sha, as the last fsync left it
        self.nsnap = 0
        self.stats = {"create": [0, 0], "delete": [0, 0], "clean": [0, 0]}
        self.errors = []

    # ---- daemon --------------------------------------------------------

    def mounted(self):
        with open("/proc/self/mountinfo") as f:
            return any(l.split()[4] == self.mnt for l in f)

    def mount(self, opts=""):
        self.daemon = subprocess.Popen([self.a.daemon, "-f", "-o", "commit=2" + opts,
                                        self.a.image, self.mnt],
                                       stdout=self.log, stderr=self.log)
        for _ in range(600):
            if self.mounted():
                return
            if self.daemon.poll() is not None:
                raise SystemExit("daemon exited with %d while mounting" %
                                 self.daemon.returncode)
            time.sleep(0.05)
        raise SystemExit("mount timed out")

    def kill(self):
        self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()
        self.daemon = None
        for cmd in (["fusermount3", "-u", "-z", self.mnt], ["umount", "-l", self.mnt]):
            if not self.mounted():
                break
            subprocess.run(cmd, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if not self.mounted():
                return
            time.sleep(0.1)
        raise SystemExit("%s still mounted after the kill" % self.mnt)

    def umount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], check=True)
        rc = self.daemon.wait(120)
        self.daemon = None
        if rc:
            raise SystemExit("daemon exited with %d at unmount" % rc)

    def stop(self):
        """on the way out, whatever happened: by PID"""
        if self.daemon and self.daemon.poll() is None:
            self.daemon.kill()
            self.daemon.wait()
        if self.mounted():
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], stderr=subprocess.DEVNULL)

    def fsck(self, what):
        r = subprocess.run([self.a.fsck, "-n", self.a.image], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("%s: fsck -n exit %d:\n%s%s" % (what, r.returncode,
                                                             r.stdout[-3000:], r.stderr[-2000:]))

    def arbor(self, cmd, timeout=120):
        return subprocess.run([self.a.arbor] + cmd, capture_output=True, text=True,
                              timeout=timeout)

    def must(self, cmd, timeout=120):
        r = self.arbor(cmd, timeout)
        if r.returncode != 0:
            raise SystemExit("arbor %s: exit %d: %s%s" % (" ".join(cmd), r.returncode,
                                                          r.stdout, r.stderr))
        return r.stdout

    # ---- trees ---------------------------------------------------------

    @staticmethod
    def manifest(root):
        m = {}
        for dp, dns, fns in os.walk(root):
            dns.sort()
            for fn in fns:
                full = os.path.join(dp, fn)
                with open(full, "rb") as f:
                    m[os.path.relpath(full, root)] = sha(f.read())
            for dn in dns:
                m[os.path.relpath(os.path.join(dp, dn), root) + "/"] = "dir"
        return m

    def sv_change(self, n):
        """n files of sv rewritten (or made, or removed), each fsynced"""
        for _ in range(n):
            rel = "f%d" % self.rnd.randrange(80)
            p = os.path.join(self.sv, rel)
            try:
                if rel in self.model and self.rnd.random() < 0.15:
                    self.model.pop(rel)
                    os.unlink(p)
                    continue
                size = self.rnd.choice([0, 100, 3000, 5000, 16384, 70000])
                if self.rnd.random() < 0.05:
                    size = 1 << 20
                data = self.rnd.randbytes(size)
                self.model.pop(rel, None)  # unknown while in flight
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    os.write(fd, data)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self.model[rel] = sha(data)
            except OSError as e:
                raise Died(e)

    def snapshot(self, ro):
        name = "s%04d" % self.nsnap
        self.nsnap += 1
        self.snaps[name] = {"exp": dict(self.model), "ro": ro, "st": "maybe",
                            "touched": True}
        r = self.arbor(["subvolume", "snapshot"] + (["-r"] if ro else []) +
                       [self.sv, os.path.join(self.snapdir, name)])
        if r.returncode != 0:
            raise Died(r.stderr.strip())
        if "Created" not in r.stdout:
            self.errors.append("snapshot %s: exit 0, says %r" % (name, r.stdout))
        self.snaps[name]["st"] = "created"
        return name

    def delete(self, names):
        for n in names:
            self.snaps[n]["st"] = "maybe_deleted"
            self.snaps[n]["touched"] = True
        r = self.arbor(["subvolume", "delete"] + [os.path.join(self.snapdir, n) for n in names])
        if r.returncode != 0:
            raise Died(r.stderr.strip())
        for n in names:
            self.snaps[n]["st"] = "deleted"

    def existing(self):
        return sorted(n for n, s in self.snaps.items() if s["st"] == "created")

    # ---- after a remount -----------------------------------------------

    def listed(self):
        j = json.loads(self.must(["subvolume", "list", "--json", self.mnt]))
        return j["subvolumes"]

    def verify(self, what, sample=3):
        err = []
        lst = self.listed()
        live = {s["path"]: s for s in lst if not s["deleted"]}
        for p in live:
            if p in ("sv", "noise"):
                continue
            n = p[len("snaps/"):] if p.startswith("snaps/") else None
            if n not in self.snaps or self.snaps[n]["st"] in ("deleted", "gone"):
                err.append("subvolume %s is listed; nobody made it (or it was "
                           "deleted)" % p)
        if os.path.isdir(self.snapdir):
            for n in os.listdir(self.snapdir):
                if n not in self.snaps:
                    err.append("snaps/%s exists; nobody made it" % n)
        old = [n for n, s in self.snaps.items() if s["st"] == "created" and not s["touched"]]
        check = set(self.rnd.sample(old, min(sample, len(old))))
        for n, s in sorted(self.snaps.items()):
            path = os.path.join(self.snapdir, n)
            there = os.path.lexists(path)
            inlist = ("snaps/" + n) in live
            if there != inlist and s["st"] not in ("deleted", "gone"):
                err.append("%s: %s but %s by subvolume list" %
                           (n, "exists" if there else "missing",
                            "listed" if inlist else "not listed"))
            st = s["st"]
            if st in ("deleted", "gone"):
                if there:
                    err.append("%s: exists; its delete had returned" % n
                               if st == "deleted" else "%s: exists again" % n)
                continue
            if st in ("maybe", "maybe_deleted") and not there:
                s["st"] = "gone"
                continue
            if st == "created" and not there:
                err.append("%s: missing; arbor had reported it created" % n)
                continue
            if s["touched"] or n in check:
                m = self.manifest(path)
                if m != s["exp"]:
                    diff = [k for k in sorted(set(m) | set(s["exp"]))
                            if m.get(k) != s["exp"].get(k)][:6]
                    err.append("%s (%s): not what sv held when it was asked "
                               "for (%d entries, want %d; differ: %s)" %
                               (n, st, len(m), len(s["exp"]), ", ".join(diff)))
                ro = live["snaps/" + n]["readonly"] if inlist else None
                if inlist and ro != s["ro"]:
                    err.append("%s: read-only %s, want %s" % (n, ro, s["ro"]))
            s["st"] = "created"
            s["touched"] = False
        if err:
            raise SystemExit("%s:\n  %s" % (what, "\n  ".join(err[:30])))

    def sync_clean(self, what):
        t = time.monotonic()
        r = self.arbor(["subvolume", "sync", self.mnt], timeout=self.a.sync_timeout)
        if r.returncode != 0:
            raise SystemExit("%s: subvolume sync exit %d: %s" % (what, r.returncode, r.stderr))
        left = [s for s in self.listed() if s["deleted"]]
        if left:
            raise SystemExit("%s: after subvolume sync, deleted subvolumes still "
                             "listed: %s" % (what, [s["id"] for s in left]))
        return time.monotonic() - t

    # ---- rounds --------------------------------------------------------

    def noise(self, stop):
        """unsynced data in noise/ while snapshots are made"""
        rnd = random.Random(self.rnd.random())
        d = os.path.join(self.mnt, "noise")
        try:
            while not stop.is_set():
                p = os.path.join(d, "n%d" % rnd.randrange(20))
                with open(p, "ab" if rnd.random() < 0.7 else "wb") as f:
                    f.write(rnd.randbytes(rnd.choice([4096, 65536, 262144])))
                if os.path.getsize(p) > (4 << 20):
                    os.truncate(p, 0)
        except OSError:
            pass

    def act_create(self, box):
        while True:
            self.sv_change(self.rnd.randrange(1, 4))
            self.snapshot(self.rnd.random() < 0.5)
            box["n"] += 1

    def act_delete(self, box):
        names = self.existing()
        self.rnd.shuffle(names)
        while names:
            k = min(len(names), self.rnd.choice([1, 1, 2, 4]))
            self.delete(names[:k])
            names = names[k:]
            box["n"] += k

    def act_clean(self, box):
        # Some victims have a file open: the cleaner leaves a subvolume
        # alone while an inode of it is in use, and sync waits; the file
        # is closed at a random instant, so the kill finds the cleaning
        # not begun, under way or done.
        held = []
        for n in box["victims"]:
            if self.rnd.random() < 0.5:
                fd = os.open(os.path.join(self.snapdir, n, "own"), os.O_RDONLY)
                held.append((n, fd))
        # one per call: the cleaner works on the first ones meanwhile
        for n in box["victims"]:
            self.delete([n])
            box["n"] += 1
        box["deleted"].set()
        sync = subprocess.Popen([self.a.arbor, "subvolume", "sync", self.mnt],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            time.sleep(self.rnd.uniform(0, self.a.clean_window))
            while held:
                # an open file of a deleted subvolume still reads; each
                # leaves the list before it is closed, so that the
                # finally below never closes a number twice (another
                # thread's descriptor may have it by then)
                n, fd = held.pop(0)
                try:
                    d = self.read_fd(fd)
                finally:
                    os.close(fd)
                if sha(d) != self.snaps[n]["own"]:
                    self.errors.append("%s/own, open across its delete, reads "
                                       "other bytes" % n)
            rc = sync.wait(self.a.sync_timeout)
        finally:
            for _, fd in held:
                try:
                    os.close(fd)
                except OSError:
                    pass
            if sync.poll() is None:
                sync.kill()
                sync.wait()
        if rc != 0:
            raise Died(sync.stderr.read().decode(errors="replace").strip())
        box["synced"] = True

    @staticmethod
    def read_fd(fd):
        os.lseek(fd, 0, os.SEEK_SET)
        d = b""
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return d
            d += b

    def prepare_clean(self):
        """writable snapshots with exclusive data and nodes"""
        victims = []
        for _ in range(self.rnd.randrange(2, 5)):
            n = self.snapshot(False)
            root = os.path.join(self.snapdir, n)
            # exclusive data for the cleaner to free
            own = self.rnd.randbytes(self.rnd.choice([1, 4, 8]) << 20)
            with open(os.path.join(root, "own"), "wb") as f:
                f.write(own)
                f.flush()
                os.fsync(f.fileno())
            self.snaps[n]["own"] = sha(own)
            for rel in sorted(self.snaps[n]["exp"]):
                if rel.endswith("/"):
                    continue
                p = os.path.join(root, rel)
                os.chmod(p, 0o600)
                if self.rnd.random() < 0.3:
                    with open(p, "wb") as f:
                        f.write(self.rnd.randbytes(self.rnd.choice([4096, 65536])))
                        f.flush()
                        os.fsync(f.fileno())
            self.snaps[n]["exp"] = self.manifest(root)
            victims.append(n)
        return victims

    def round(self, r, kind):
        box = {"n": 0, "synced": False}
        stop = threading.Event()
        helper = None
        if kind == "create":
            helper = threading.Thread(target=self.noise, args=(stop,))
            helper.start()
            act = self.act_create
            delay = self.rnd.uniform(0.02, self.a.max_delay)
        elif kind == "delete":
            while len(self.existing()) < 4:
                self.sv_change(1)
                self.snapshot(self.rnd.random() < 0.5)
            act = self.act_delete
            delay = self.rnd.uniform(0.0, self.a.max_delay / 2)
        else:
            box["victims"] = self.prepare_clean()
            box["deleted"] = threading.Event()
            act = self.act_clean
            # from the return of the last delete: the cleaner runs (it
            # starts at the first delete), sync waits for it
            delay = self.rnd.uniform(0.0, self.a.clean_window)
        out = {}

        def run():
            try:
                act(box)
            except (Died, OSError, subprocess.TimeoutExpired) as e:
                out["died"] = str(e)[:200]
            except BaseException as e:  # noqa: a bug of this script
                out["exc"] = e

        th = threading.Thread(target=run)
        th.start()
        if kind == "clean":
            box["deleted"].wait(60)
        th.join(delay)
        busy = th.is_alive()
        self.kill()
        th.join(120)
        stop.set()
        if helper:
            helper.join(60)
        if th.is_alive():
            raise SystemExit("round %d: the %s action hangs after the kill" % (r, kind))
        if "exc" in out:
            raise out["exc"]
        if not busy and ("died" in out or kind == "create"):
            # the action failed before the kill (a create round never
            # ends by itself)
            raise SystemExit("round %d (%s): the action ended before the kill: %s" %
                             (r, kind, out.get("died", "no error")))
        self.stats[kind][0] += 1
        if busy:
            self.stats[kind][1] += 1
        print("round %d: %-6s killed after %.3f s (%d %s)%s" %
              (r, kind, delay, box["n"], "snapshots made" if kind == "create"
               else "deleted", "" if busy else ", after the action had ended"), flush=True)

    def big_round(self, r):
        """a big subvolume deleted, the daemon killed while cleaning it"""
        path = os.path.join(self.mnt, "big%d" % r)
        self.must(["subvolume", "create", path])
        n = self.a.big_files
        for d in range(0, n, 500):
            dp = os.path.join(path, "d%d" % d)
            os.mkdir(dp)
            for i in range(d, min(n, d + 500)):
                with open(os.path.join(dp, "f%d" % i), "wb") as f:
                    f.write(b"b" * (8192 if i % 16 == 0 else 100))
        self.must(["filesystem", "sync", self.mnt])
        self.umount()
        # small batches: the cleaning lasts long enough to be caught
        self.mount(",clean_batch=%d" % self.rnd.choice([1, 2, 4]))
        self.must(["subvolume", "delete", path])
        seen = None
        for _ in range(4000):
            dl = [s for s in self.listed() if s["deleted"]]
            if not dl:
                break
            c = dl[0]["cleaning"]
            if c["nodes"] > 0 and self.rnd.random() < 0.3:
                seen = c
                break
            time.sleep(0.002)
        if seen:
            # what the cleaner did so far committed; then more of it
            self.must(["filesystem", "sync", self.mnt])
            time.sleep(self.rnd.uniform(0, 0.05))
        self.kill()
        self.daemon_log_clean()
        self.fsck("round %d (big) after the kill" % r)
        j = json.loads(subprocess.run([self.a.arbor, "subvolume", "list", "--json",
                                       "--image", self.a.image], capture_output=True,
                                      text=True, check=True).stdout)
        left = [s for s in j["subvolumes"] if s["deleted"]]
        part = [s for s in left if s["cleaning"]["nodes"] > 0]
        if part:
            self.stats["big_part"] = self.stats.get("big_part", 0) + 1
        print("round %d: big    %d files, killed %s; on the image: %s" %
              (r, n, "with the cleaning under way (%d nodes, %.1f%%)" %
               (seen["nodes"], seen["permille"] / 10.0) if seen else
               "(the cleaning not seen under way)",
               "%d nodes dropped (%.1f%%), resumed at mount" %
               (part[0]["cleaning"]["nodes"], part[0]["cleaning"]["permille"] / 10.0)
               if part else "%d deleted" % len(left)), flush=True)
        self.mount()
        self.sync_clean("round %d (big)" % r)

    def daemon_log_clean(self):
        self.log.flush()
        with open(self.a.log, "rb") as f:
            t = f.read()
        for pat in (b"ERROR: AddressSanitizer", b"runtime error:", b"ERROR: LeakSanitizer"):
            i = t.find(pat)
            if i >= 0:
                raise SystemExit("sanitizer report in the daemon log:\n%s" %
                                 t[i:i + 3000].decode(errors="replace"))

    def usage_image(self):
        out = subprocess.run([self.a.arbor, "usage", "--image", self.a.image],
                             capture_output=True, text=True, check=True).stdout
        u = {}
        for line in out.splitlines():
            p = line.replace("node size", "node").split()
            if len(p) >= 2 and p[1].isdigit():
                u[p[0]] = int(p[1])
        return u

    def main(self):
        u0 = self.usage_image()
        node = u0["node"]
        self.mount()
        self.must(["subvolume", "create", self.sv])
        self.must(["subvolume", "create", os.path.join(self.mnt, "noise")])
        os.mkdir(self.snapdir)
        self.sv_change(40)
        self.must(["filesystem", "sync", self.mnt])
        kinds = (["create", "delete", "clean"] * (self.a.rounds // 3 + 1))[:self.a.rounds]
        # create rounds first in each group of three, otherwise shuffled
        order = []
        for i in range(0, len(kinds), 3):
            g = kinds[i:i + 3]
            self.rnd.shuffle(g)
            if "create" in g:
                g.remove("create")
                g.insert(0, "create")
            order += g
        for r, kind in enumerate(order):
            self.round(r, kind)
            if self.errors:
                raise SystemExit("round %d (%s):\n  %s" % (r, kind, "\n  ".join(self.errors)))
            self.daemon_log_clean()
            self.fsck("round %d (%s) after the kill" % (r, kind))
            j = json.loads(subprocess.run([self.a.arbor, "subvolume", "list", "--json",
                                           "--image", self.a.image], capture_output=True,
                                          text=True, check=True).stdout)
            pending = sum(1 for s in j["subvolumes"] if s["deleted"])
            if pending:
                self.stats["pending"] = self.stats.get("pending", 0) + 1
                print("  %d deleted subvolume(s) left to clean on the image" % pending)
            self.mount()
            self.verify("round %d (%s) after the kill and a remount" % (r, kind))
            self.sync_clean("round %d (%s)" % (r, kind))
            # what sv holds now (a change cut off by the kill is whatever
            # it became: crash.sh checks fsync's promise, not this test)
            self.model = {k: v for k, v in self.manifest(self.sv).items()
                          if not k.endswith("/")}
        for r in range(len(order), len(order) + self.a.big_rounds):
            self.big_round(r)
        # the end: everything verified, deleted, cleaned; usage as when empty
        self.verify("final", sample=len(self.snaps))
        names = self.existing()
        if names:
            self.delete(names)
        self.must(["subvolume", "delete", self.sv, os.path.join(self.mnt, "noise")])
        dt = self.sync_clean("final")
        self.umount()
        self.daemon_log_clean()
        self.fsck("final")
        u1 = self.usage_image()
        errs = []
        if u1["data"] != u0["data"]:
            errs.append("data %d B with every subvolume gone, %d B when new" %
                        (u1["data"], u0["data"]))
        # the root tree may have grown a level, and the free space tree
        if abs(u1["metadata"] - u0["metadata"]) > 4 * 2 * node:
            errs.append("metadata %d B with every subvolume gone, %d B when new" %
                        (u1["metadata"], u0["metadata"]))
        if errs:
            raise SystemExit("space did not come back: " + "; ".join(errs))
        made = sum(1 for s in self.snaps.values() if s["st"] in ("created", "deleted"))
        print("snapcrash: %d kills (during: create %d/%d, delete %d/%d, clean %d/%d "
              "while the action ran), fsck clean and every snapshot checked after "
              "each; %d snapshots made; %d kills left cleaning to resume; "
              "%d of %d big rounds left a tree partly dropped; "
              "last sync %.2f s; space back to %d B data, "
              "%d B metadata" %
              (len(order), self.stats["create"][1], self.stats["create"][0],
               self.stats["delete"][1], self.stats["delete"][0],
               self.stats["clean"][1], self.stats["clean"][0], made,
               self.stats.get("pending", 0), self.stats.get("big_part", 0),
               self.a.big_rounds, dt,
               u1["data"], u1["metadata"]))
        return 0


def main():
    ap = argparse.ArgumentParser()
    for o in ("daemon", "arbor", "fsck", "image", "mnt", "log"):
        ap.add_argument("--" + o, required=True)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--max-delay", type=float, default=1.5)
    ap.add_argument("--sync-timeout", type=float, default=120)
    ap.add_argument("--clean-window", type=float, default=0.3)
    ap.add_argument("--big-rounds", type=int, default=2)
    ap.add_argument("--big-files", type=int, default=20000)
    args = ap.parse_args()
    print("snapcrash.py: seed %d" % args.seed, flush=True)
    c = Crash(args)
    try:
        return c.main()
    finally:
        c.stop()


if __name__ == "__main__":
    sys.exit(main())
