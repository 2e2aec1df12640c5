#!/usr/bin/env python3
"""Snapshot of what the kernel says about the farm and the machine, for comparing two moments of a
run: snap.py FILE writes one JSON object; snap.py --diff A B [microbench_s] prints the differences."""
import glob, json, os, sys, time


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def proc(pid):
    stat = read(f"/proc/{pid}/stat")
    if not stat:
        return None
    fields = stat[stat.rfind(")") + 2:].split()
    status = dict(line.split(":", 1) for line in read(f"/proc/{pid}/status").splitlines() if ":" in line)
    tasks = {}
    for t in glob.glob(f"/proc/{pid}/task/*"):
        s = read(t + "/schedstat").split()
        st = read(t + "/stat")
        if s and st:
            tf = st[st.rfind(")") + 2:].split()
            tasks[os.path.basename(t)] = {"run_ns": int(s[0]), "wait_ns": int(s[1]), "slices": int(s[2]),
                                           "cpu": int(tf[36]), "comm": st[st.find("(") + 1:st.rfind(")")]}
    roll = dict((l.split(":")[0], int(l.split()[1])) for l in read(f"/proc/{pid}/smaps_rollup").splitlines()[1:]
                if l.split()[-1] == "kB")
    return {"anon_huge_kb": roll.get("AnonHugePages", 0), "file_pmd_kb": roll.get("FilePmdMapped", 0),
            "minflt": int(fields[7]), "majflt": int(fields[9]), "utime": int(fields[11]), "stime": int(fields[12]),
            "threads": int(status.get("Threads", "0")), "cpus": status.get("Cpus_allowed_list", "").strip(),
            "rss_kb": int(status.get("VmRSS", "0 kB").split()[0] or 0),
            "vcsw": int(status.get("voluntary_ctxt_switches", "0")),
            "ivcsw": int(status.get("nonvoluntary_ctxt_switches", "0")), "tasks": tasks}


def pids(name):
    out = []
    for p in glob.glob("/proc/[0-9]*"):
        if read(p + "/comm").strip() == name:
            out.append(int(os.path.basename(p)))
    return out


def interrupts():
    lines = read("/proc/interrupts").splitlines()
    ncpu = len(lines[0].split())
    out = {}
    for line in lines[1:]:
        parts = line.split()
        key = parts[0].rstrip(":")
        nums = [int(x) for x in parts[1:1 + ncpu] if x.isdigit()]
        out[key] = sum(nums)
    return out


def snap():
    return {
        "t": time.time(),
        "daemons": {p: proc(p) for p in pids("gpfarmd")},
        "gp": {p: proc(p) for p in pids("gpfarm")},
        "stat": read("/proc/stat").splitlines()[0].split()[1:],
        "intr": interrupts(),
        "vmstat": dict((l.split()[0], int(l.split()[1])) for l in read("/proc/vmstat").splitlines()),
        "pressure": {k: read(f"/proc/pressure/{k}") for k in ("cpu", "memory", "io")},
        "meminfo": read("/proc/meminfo"),
        "loadavg": read("/proc/loadavg"),
    }


def diff(a, b, bench):
    dt = b["t"] - a["t"]
    out = [f"interval {dt:.2f} s, microbench {bench}"]
    for kind in ("daemons", "gp"):
        keys = set(a[kind]) & set(b[kind])
        if not keys:
            out.append(f"{kind}: none in both")
            continue
        tot = {"minflt": 0, "majflt": 0, "utime": 0, "stime": 0, "vcsw": 0, "ivcsw": 0, "run_ns": 0, "wait_ns": 0}
        cpus, threads, rss, lastcpu = set(), [], [], []
        for k in keys:
            x, y = a[kind][k], b[kind][k]
            if not x or not y:
                continue
            for f in ("minflt", "majflt", "utime", "stime", "vcsw", "ivcsw"):
                tot[f] += y[f] - x[f]
            for t, ty in y["tasks"].items():
                tx = x["tasks"].get(t, {"run_ns": 0, "wait_ns": 0})
                tot["run_ns"] += ty["run_ns"] - tx["run_ns"]
                tot["wait_ns"] += ty["wait_ns"] - tx["wait_ns"]
                lastcpu.append(ty["cpu"])
            cpus.add(y["cpus"]); threads.append(y["threads"]); rss.append(y["rss_kb"])
        out.append(f"{kind} x{len(keys)}: cpu {tot['run_ns']/1e9/dt:.2f} cores, runqueue wait {tot['wait_ns']/1e9/dt:.2f}, "
                   f"utime {tot['utime']/100/dt:.2f} stime {tot['stime']/100/dt:.2f} cores, minflt {tot['minflt']/dt:.0f}/s "
                   f"majflt {tot['majflt']}, csw {tot['vcsw']/dt:.0f}/s invol {tot['ivcsw']/dt:.0f}/s, threads {sorted(set(threads))}, "
                   f"rss MB {min(rss)//1024}-{max(rss)//1024}, anon huge MB {sum(b[kind][k]['anon_huge_kb'] for k in keys if b[kind][k])//1024}, "
                   f"file pmd MB {sum(b[kind][k]['file_pmd_kb'] for k in keys if b[kind][k])//1024}, allowed {sorted(cpus)}, on cpus {sorted(set(lastcpu))}")
    sa, sb = [int(x) for x in a["stat"]], [int(x) for x in b["stat"]]
    d = [y - x for x, y in zip(sa, sb)]
    tot = sum(d[:8]) or 1
    names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
    out.append("cpu " + " ".join(f"{n} {100*v/tot:.0f}%" for n, v in zip(names, d[:8])))
    di = {k: b["intr"].get(k, 0) - v for k, v in a["intr"].items()}
    out.append("interrupts/s " + " ".join(f"{k}={v/dt:.0f}" for k, v in sorted(di.items(), key=lambda kv: -kv[1])[:10]))
    dv = {k: b["vmstat"].get(k, 0) - v for k, v in a["vmstat"].items()}
    out.append("vmstat/s " + " ".join(f"{k}={v/dt:.0f}" for k, v in sorted(dv.items(), key=lambda kv: -abs(kv[1]))[:16] if v))
    out.append("pressure " + " | ".join(f"{k}: {b['pressure'][k].splitlines()[0] if b['pressure'][k] else ''}" for k in ("cpu", "memory")))
    out.append("loadavg " + b["loadavg"].strip())
    return "\n".join(out)


def summary(path):
    gens = []
    for line in open(path):
        try:
            gens.append(json.loads(line))
        except ValueError:
            pass
    gens = [g for g in gens if "generation_ms" in g]
    mean = sum(g["generation_ms"] for g in gens) / max(len(gens), 1)
    return f"{len(gens)} generations, mean {mean:.0f} ms/gen"


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        print(summary(sys.argv[2]))
    elif sys.argv[1] == "--diff":
        a, b = (json.load(open(p)) for p in sys.argv[2:4])
        print(diff(a, b, sys.argv[4] if len(sys.argv) > 4 else "-"))
    else:
        json.dump(snap(), open(sys.argv[1], "w"))
