"""Run `pytest -m gpu` in parallel shards within a time limit, and say what passed, what failed
(with the traceback) and what did not run.

    python scripts/gpu_tests.py OUTDIR [--shards 4] [--limit 540] [-k EXPR] [test files ...]

The GPU tests are mostly compile-bound (NVRTC and Triton compile on the CPU), so a 16-core host
runs several pytest processes side by side; they share the on-disk build cache
(lab/toolchain/cache.py writes entries atomically). Each shard streams its outcomes to
OUTDIR/shard-N.log as they happen (tests/conftest.py, LAB_TEST_STREAM), so a shard stopped at the
time limit still reports every test it finished; OUTDIR/summary.txt lists failures and the tests
that did not run, ready to pass to the next run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def collect(files: list[str], keyword: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "--collect-only", "-q",
           "-p", "no:cacheprovider", *(["-k", keyword] if keyword else []), *files]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "::" in line and not line.startswith(" ")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("files", nargs="*", default=["tests"])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--limit", type=float, default=540.0, help="seconds before shards are stopped")
    ap.add_argument("-k", dest="keyword")
    ap.add_argument("--ids", help="a file of test ids to run (one per line) instead of collecting")
    args = ap.parse_intermixed_args(argv)
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    ids = (Path(args.ids).read_text().split() if args.ids else collect(args.files, args.keyword))
    if not ids:
        print("no GPU tests collected")
        return 1
    shards = [ids[i::args.shards] for i in range(min(args.shards, len(ids)))]
    procs = []
    for n, shard in enumerate(shards):
        (out / f"shard-{n}.ids").write_text("\n".join(shard) + "\n")
        log = out / f"shard-{n}.log"
        log.write_text("")
        env = {**os.environ, "LAB_TEST_STREAM": str(log)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short",
               "-m", "gpu", *shard]
        procs.append(subprocess.Popen(cmd, env=env, stdout=open(out / f"shard-{n}.out", "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
    print(f"{len(ids)} GPU tests in {len(shards)} shards, limit {args.limit:.0f} s", flush=True)
    while any(p.poll() is None for p in procs):
        if time.monotonic() - start > args.limit:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, 9)
            break
        time.sleep(2)
    done: dict[str, str] = {}
    failures: list[str] = []
    for n in range(len(shards)):
        for line in (out / f"shard-{n}.log").read_text().splitlines():
            if line.startswith("    "):
                failures.append(line)
                continue
            outcome, rest = line.split(" ", 1)
            nodeid = rest.rsplit(" ", 2)[0]  # a node id may hold spaces: "...[{'a': 1}]"
            done[nodeid] = outcome
            if outcome.startswith(("FAILED", "ERROR")):
                failures.append(line)
    left = [i for i in ids if i not in done]
    counts: dict[str, int] = {}
    for outcome in done.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    summary = [f"{len(ids)} collected; " + ", ".join(f"{v} {k.lower()}" for k, v in
                                                   sorted(counts.items()))
               + f"; {len(left)} not run; {time.monotonic() - start:.0f} s"]
    summary += failures
    if left:
        (out / "not-run.ids").write_text("\n".join(left) + "\n")
        summary.append(f"not run: {len(left)} tests, listed in {out / 'not-run.ids'}")
    (out / "summary.txt").write_text("\n".join(summary) + "\n")
    print("\n".join(summary[:200]))
    bad = any(o.startswith(("FAILED", "ERROR")) for o in done.values())
    return 1 if bad or left else 0


if __name__ == "__main__":
    sys.exit(main())
