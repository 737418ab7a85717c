#!/usr/bin/env python3
"""Turn convgrad-bench's Google Benchmark JSON into a markdown table and a
PNG plot (per-layer GFLOP/s of each implementation against the peak line).

Needs only Debian packages: python3 (standard library) and gnuplot
(gnuplot-nox). Usage:

  convgrad-bench --benchmark_out=bench.json --benchmark_out_format=json
  tools/bench_report.py bench.json --md=bench.md --png=bench.png

With repetitions (--benchmark_repetitions=N) the median aggregate is used.
One PNG per data type when the run has several (bench_f32.png, ...).
Below the table, a summary per op and data type: geometric means of the
ratios to oneDNN and % of peak (minimum, median, maximum over the layers).
Runs with --impl=create add a table of op creation times (cold: every
kernel generated; cached: every kernel found in the process's cache).
"""
import argparse
import json
import math
import os
import statistics
import shutil
import subprocess
import sys
import tempfile

IMPLS = ["jit", "ref", "onednn", "onednn_plain"]
CREATE = ["create_cold", "create_cached"]
TITLES = {"jit": "convgrad", "ref": "convgrad ref", "onednn": "oneDNN (blocked)",
          "onednn_plain": "oneDNN (plain NXC, reorders timed)"}


def split_name(run_name):
    """'bwd_w/f32/conv2/3x3/jit' -> (op, dt, layer, impl); layers may hold '/'."""
    parts = run_name.split("/")
    if parts and parts[-1] in ("real_time", "manual_time"):
        parts = parts[:-1]
    if len(parts) < 4:
        raise ValueError("unexpected benchmark name %r" % run_name)
    return parts[0], parts[1], "/".join(parts[2:-1]), parts[-1]


def load_rows(path):
    """{(op, dt, layer): {impl: benchmark entry}}, in first-seen order."""
    with open(path) as f:
        doc = json.load(f)
    runs, medians = {}, {}
    for b in doc.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        key = split_name(b.get("run_name", b["name"]))
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[key] = b
        else:
            runs.setdefault(key, b)  # the first repetition
    runs.update(medians)
    rows = {}
    for (op, dt, layer, impl), b in runs.items():
        rows.setdefault((op, dt, layer), {})[impl] = b
    return rows, doc.get("context", {})


def fmt(v, digits=1):
    return "–" if v is None else ("%.*f" % (digits, v))


def gflops(entry):
    return None if entry is None else entry.get("GFLOPS")


def micros(entry):
    """Time per iteration of a create row in microseconds."""
    if entry is None:
        return None
    scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[entry.get("time_unit", "ns")]
    return entry["real_time"] * scale


def creation(rows):
    """Op creation table and its summary, or [] when the run had no create rows."""
    timed = [(k, v) for k, v in rows.items() if any(i in v for i in CREATE)]
    if not timed:
        return []
    out = ["| layer | op | dt | create cold µs | kernels generated | create cached µs | impl |",
           "|---|---|---|---:|---:|---:|---|"]
    for (op, dt, layer), impls in timed:
        cold, cached = impls.get("create_cold"), impls.get("create_cached")
        kernels = cold.get("kernels") if cold else None
        label = (cold or cached).get("label", "–")
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (layer, op, dt, fmt(micros(cold)),
                   "–" if kernels is None else "%d" % kernels, fmt(micros(cached), 2), label))
    colds = [micros(v["create_cold"]) for _, v in timed if "create_cold" in v]
    cacheds = [micros(v["create_cached"]) for _, v in timed if "create_cached" in v]
    spread = lambda xs, d: "%s / %s / %s" % (fmt(min(xs), d), fmt(statistics.median(xs), d), fmt(max(xs), d)) if xs else "–"
    out.append("")
    out.append("Op creation over %d cases, min / median / max: cold %s µs, cached %s µs." % (
        len(timed), spread(colds, 1), spread(cacheds, 2)))
    return ["", "Op creation (validation, plan, kernels; `--impl=create`):", ""] + out


def perf_rows(rows):
    """The rows that timed an execution (not only op creation)."""
    return {k: v for k, v in rows.items() if any(i in v for i in IMPLS)}


def markdown(rows, context):
    timed = perf_rows(rows)
    if not timed:
        return "\n".join(creation(rows)[1:]) + "\n"
    out = ["| layer | op | dt | convgrad GFLOP/s | % peak | ref | oneDNN | oneDNN plain"
           " | convgrad ÷ oneDNN | convgrad ÷ oneDNN plain | convgrad impl | oneDNN impl |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for (op, dt, layer), impls in timed.items():
        g = {i: gflops(impls.get(i)) for i in IMPLS}
        jit = impls.get("jit", {})
        ratio = lambda other: (g["jit"] / g[other]) if g["jit"] and g[other] else None
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            layer, op, dt, fmt(g["jit"]), fmt(jit.get("peak_pct")), fmt(g["ref"], 2), fmt(g["onednn"]),
            fmt(g["onednn_plain"]), fmt(ratio("onednn"), 2), fmt(ratio("onednn_plain"), 2),
            jit.get("label", "–"), impls.get("onednn", {}).get("label", "–")))
    threads = context.get("convgrad.threads", "?")
    peaks = context.get("convgrad.peaks", "?")
    out.append("")
    out.append("Threads: %s. Peak: %s. Ratios > 1: convgrad is faster." % (threads, peaks))
    out.append("")
    out.extend(summary(timed))
    out.extend(creation(rows))
    return "\n".join(out) + "\n"


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary(rows):
    """Per (op, dt): layers, geomean ratios to oneDNN (layers where both ran), % of peak."""
    out = ["| op | dt | layers | geomean convgrad ÷ oneDNN | geomean convgrad ÷ oneDNN plain"
           " | % peak min / median / max |", "|---|---|---:|---:|---:|---|"]
    groups = {}
    for (op, dt, _), impls in rows.items():
        groups.setdefault((op, dt), []).append(impls)
    for (op, dt), layers in groups.items():
        jit = [l for l in layers if gflops(l.get("jit"))]
        ratio = lambda other: geomean([gflops(l["jit"]) / gflops(l[other]) for l in jit if gflops(l.get(other))])
        pct = [l["jit"]["peak_pct"] for l in jit if "peak_pct" in l["jit"]]
        spread = "%s / %s / %s" % (fmt(min(pct)), fmt(statistics.median(pct)), fmt(max(pct))) if pct else "–"
        out.append("| %s | %s | %d | %s | %s | %s |" % (op, dt, len(jit), fmt(ratio("onednn"), 2),
                                                      fmt(ratio("onednn_plain"), 2), spread))
    return out


def plot(rows, png, dt):
    """One PNG for data type dt with gnuplot; returns the file written."""
    selected = [(k, v) for k, v in rows.items() if k[1] == dt]
    if not selected:
        return None
    data = tempfile.NamedTemporaryFile("w", suffix=".dat", delete=False)
    peak = 0.0
    for index, ((op, _, layer), impls) in enumerate(selected):
        vals = [gflops(impls.get(i)) for i in IMPLS]
        peak = max([peak] + [e.get("peak", 0.0) for e in impls.values()])
        data.write('%d "%s %s" %s\n' % (index, layer, op, " ".join("NaN" if v is None else repr(v) for v in vals)))
    data.close()
    series = ", ".join("'%s' using 1:%d:xtic(2) with linespoints title '%s'" % (data.name, 3 + n, TITLES[i])
                       for n, i in enumerate(IMPLS))
    script = "\n".join([
        "set terminal pngcairo size %d,720 noenhanced" % max(900, 40 * len(selected) + 300),
        "set output '%s'" % png,
        "set title 'convgrad-bench, %s: GFLOP/s per layer (benchdnn flop count)'" % dt,
        "set ylabel 'GFLOP/s (log scale)'", "set logscale y", "set grid ytics",
        "set xtics rotate by -50 font ',8'", "set key outside top center horizontal", "set rmargin 10",
        "set datafile missing 'NaN'",
        "plot %s, %r title 'peak %.0f GFLOP/s' with lines dashtype 2 lw 2" % (series, peak, peak),
    ])
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.unlink(data.name)
    return png


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="Google Benchmark JSON (--benchmark_out_format=json)")
    ap.add_argument("--md", help="write the markdown table here (default: stdout)")
    ap.add_argument("--png", help="write the plot here (needs gnuplot)")
    args = ap.parse_args()
    try:
        rows, context = load_rows(args.json)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("bench_report: %s: %s" % (args.json, e))
    if not rows:
        sys.exit("bench_report: %s holds no successful benchmark" % args.json)
    table = markdown(rows, context)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table)
    else:
        sys.stdout.write(table)
    if args.png:
        if not shutil.which("gnuplot"):
            sys.exit("bench_report: gnuplot not found (apt-get install gnuplot-nox)")
        rows = perf_rows(rows)
        dts = sorted({k[1] for k in rows})
        base, ext = os.path.splitext(args.png)
        for dt in dts:
            name = args.png if len(dts) == 1 else "%s_%s%s" % (base, dt, ext or ".png")
            print("wrote", plot(rows, name, dt), file=sys.stderr)


if __name__ == "__main__":
    main()
