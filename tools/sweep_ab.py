#!/usr/bin/env python3
"""A/B two builds (or two environments) of convgrad-sweep, interleaved.

Timings on a shared VM drift by 10-30 % within minutes, so two builds are
only compared side by side: each round runs A, then B, over the same cases
(`convgrad-sweep --mode=P ...`), and the per-case summary is the median
(or, with --min, the minimum) over the rounds. The minimum is the steadier
reading of CPU-bound code when the host's load comes and goes.

Usage:
  tools/sweep_ab.py --a=OLD/convgrad-sweep --b=NEW/convgrad-sweep --rounds=5 --min \\
      -- --op=bwd_d --dt=f32,bf16 --threads=2 --batch=bench/shapes/regnet
  tools/sweep_ab.py --a=build/release/tools/convgrad-sweep --b-env=CONVGRAD_MAX_ISA=avx2 -- ...

With --cases=FILE (one descriptor a line, `#` comments), A and B alternate
case by case instead (every round of a case before the next case), so a
slow spell of the host lands on both sides of one case:
  tools/sweep_ab.py --a=OLD --b=NEW --rounds=5 --min --cases=cases.txt -- --op=bwd_w --threads=2

Everything after `--` goes to both runs. Prints one line per case, A and B
in ms and the B speedup (A / B), then the geometric mean of the speedups.
Needs only python3's standard library.
"""
import argparse
import math
import os
import re
import statistics
import subprocess
import sys

CASE = re.compile(r"^PASS\s+(\S+)\s+(\S+)\s+\S+\s+(\S+)\s.*\|\s*P\s+([0-9.]+)\s+ms")


def run(binary, env_pairs, args):
    env = dict(os.environ)
    for pair in env_pairs:
        key, _, value = pair.partition("=")
        env[key] = value
    try:
        out = subprocess.run([binary, "--mode=P"] + args, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, check=False).stdout
    except OSError as e:
        sys.exit(f"sweep_ab: cannot run {binary}: {e}")
    times = {}
    for line in out.splitlines():
        m = CASE.match(line)
        if m:
            times[f"{m.group(1)}/{m.group(2)}/{m.group(3)}"] = float(m.group(4))
    if not times:
        sys.exit(f"sweep_ab: no timed case from {binary}:\n{out}")
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="convgrad-sweep binary A (the baseline)")
    ap.add_argument("--b", help="convgrad-sweep binary B (default: the same as A)")
    ap.add_argument("--a-env", action="append", default=[], metavar="K=V", help="environment of A's runs")
    ap.add_argument("--b-env", action="append", default=[], metavar="K=V", help="environment of B's runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min", action="store_true", help="summarise by the minimum instead of the median")
    ap.add_argument("--cases", metavar="FILE", help="descriptors, one a line: A and B alternate per case")
    ap.add_argument("sweep_args", nargs=argparse.REMAINDER)
    o = ap.parse_args()
    args = o.sweep_args[1:] if o.sweep_args[:1] == ["--"] else o.sweep_args
    batches = [args]
    if o.cases:
        with open(o.cases) as f:
            lines = [line.strip() for line in f]
        batches = [args + [line] for line in lines if line and not line.startswith("#")]
    a_runs, b_runs = {}, {}
    for batch in batches:
        for _ in range(o.rounds):
            for name, t in run(o.a, o.a_env, batch).items():
                a_runs.setdefault(name, []).append(t)
            for name, t in run(o.b or o.a, o.b_env, batch).items():
                b_runs.setdefault(name, []).append(t)
    pick = min if o.min else statistics.median
    logs = []
    for name, ts in a_runs.items():
        if name not in b_runs:
            continue
        a, b = pick(ts), pick(b_runs[name])
        logs.append(math.log(a / b))
        print(f"{name:55s} A {a:9.3f}  B {b:9.3f}  B speedup {a / b:5.2f}")
    if not logs:
        sys.exit("sweep_ab: A and B timed no case in common")
    print(f"geomean B speedup {math.exp(sum(logs) / len(logs)):.3f} over {len(logs)} cases, "
          f"{'min' if o.min else 'median'} of {o.rounds} rounds")


if __name__ == "__main__":
    main()
