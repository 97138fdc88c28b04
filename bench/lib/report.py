#!/usr/bin/env python3
"""Turn bench/run.sh's raw.tsv (+ meta.json, mounts.tsv) into results.json
and a table of medians (min-max) with the ratio of arborfs to each peer."""
import json
import os
import statistics
import sys

out = sys.argv[1]
meta = json.load(open(os.path.join(out, "meta.json")))
rows = []
for line in open(os.path.join(out, "raw.tsv")):
    f = line.rstrip("\n").split("\t")
    if len(f) < 8:
        continue
    run, phase, fs, test, unit, better, value, err = f[:8]
    rows.append({"run": int(run), "phase": phase, "fs": fs, "test": test,
                 "unit": unit, "better": better,
                 "value": None if value == "NA" else float(value),
                 "error": err or None})
mounts = {}
mp = os.path.join(out, "mounts.tsv")
if os.path.exists(mp):
    for line in open(mp):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 5:
            mounts.setdefault(f[0], {})[f[1]] = {"type_and_options": f[2],
                                                 "mkfs": f[3], "mount": f[4]}

order, fses, summary = [], [], {}
for r in rows:
    key = (r["test"], r["unit"])
    if key not in summary:
        order.append(key)
        summary[key] = {"better": r["better"], "by_fs": {}}
    if r["fs"] not in fses:
        fses.append(r["fs"])
    s = summary[key]["by_fs"].setdefault(r["fs"], {"values": [], "errors": []})
    if r["value"] is None:
        s["errors"].append(r["error"])
    else:
        s["values"].append(r["value"])
for key in order:
    for fs, s in summary[key]["by_fs"].items():
        v = s["values"]
        s["n"] = len(v)
        s["median"] = statistics.median(v) if v else None
        s["min"] = min(v) if v else None
        s["max"] = max(v) if v else None
    a = summary[key]["by_fs"].get("arborfs", {}).get("median")
    summary[key]["arborfs_ratio"] = {
        fs: (a / s["median"] if a is not None and s["median"] else None)
        for fs, s in summary[key]["by_fs"].items() if fs != "arborfs"}

meta["loadavg_end"] = open("/proc/loadavg").read().split()[:3]
result = {"meta": meta, "mount_options": mounts, "raw": rows,
          "summary": [{"test": k[0], "unit": k[1], **summary[k]} for k in order]}
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(result, f, indent=1)


def num(x):
    if x is None:
        return "NA"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def cell(s):
    if not s or s["median"] is None:
        return "NA"
    if s["n"] == 1 or s["min"] == s["max"]:
        return num(s["median"])
    return f"{num(s['median'])} ({num(s['min'])}-{num(s['max'])})"


peers = [f for f in fses if f != "arborfs"]
head = ["test", "unit"] + fses + (
    [f"arborfs/{p}" for p in peers] if "arborfs" in fses else [])
table = []
for key in order:
    s = summary[key]
    unit = key[1] + (" (lower better)" if s["better"] == "lower" else "")
    line = [key[0], unit] + [cell(s["by_fs"].get(f)) for f in fses]
    if "arborfs" in fses:
        line += ["NA" if s["arborfs_ratio"].get(p) is None
                 else f"{s['arborfs_ratio'][p]:.2f}" for p in peers]
    table.append(line)
w = [max(len(str(r[i])) for r in [head] + table) for i in range(len(head))]
m = meta
print(f"# {m['date']}  {m['nproc']} x {m['cpu_model']}, "
      f"{m['ram_bytes'] / 2**30:.1f} GiB RAM, kernel {m['kernel']}, "
      f"load {' '.join(m['loadavg_start'])} -> {' '.join(meta['loadavg_end'])}")
print(f"# runs {m['runs']}{' (quick)' if m['quick'] else ''}; "
      "cells: median (min-max) over runs; ratio: arborfs median / peer median")
for r in [head] + table:
    print("  ".join(str(c).ljust(w[i]) if i < 2 else str(c).rjust(w[i])
                    for i, c in enumerate(r)).rstrip())
errs = [r for r in rows if r["value"] is None]
if errs:
    print(f"# {len(errs)} NA results:")
    for r in errs:
        print(f"#   run {r['run']} {r['fs']} {r['test']}: {r['error']}")
