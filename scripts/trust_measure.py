"""The measurements behind docs/TRUST.md ("How matmul numbers mislead"), in one GPU run.

    PYTHONPATH=. python scripts/trust_measure.py OUT_DIR

Writes OUT_DIR/trust.csv (one row per measurement, column `example` = i..v) and
OUT_DIR/trust.env.json (lab/env.py's environment, plus the script's own timings), prints a short
summary, and finishes in well under 3 minutes on an H100. Each example runs in its own try/except:
one that fails becomes an `error` row and the others go on.

  (i)   the planted fast-but-wrong kernel (tests/planted/zero_registers.cu) vs cuBLAS fp32 at
        4096^3: its time and % of cuBLAS as a timing-only harness would report them, what the
        lab's check says (NaN-poisoned C) and what a naive `abs(c - ref) > tol` check says; the
        fixed kernel (-DACC=128) beside it.
  (ii)  TF32 vs fp32: cuBLAS at 4096^3 with TF32 allowed and with IEEE fp32; TFLOPS and the
        relative error against the float64 reference, judged by the fp32 and the TF32 threshold.
  (iii) L2 warm vs flushed: cuBLAS fp32 at 1024 and 2048 and the vectorized CUDA stage at 1024,
        timed back to back without a flush (per-launch events, and one event pair around the
        loop) and by lab.timing.bench (256 MiB written before every repetition).
  (iv)  a clock swing: cuBLAS bf16 at 4096^3 in two bursts ~20 s apart, with 15 s of bf16 8192^3
        GEMMs between them; TFLOPS and the SM clock / power / temperature / throttle reasons
        (lab.clocks.Sampler) of each burst and of the load.
  (v)   the alignment cliff: cuBLAS bf16 at 7919x6007x3001 vs 7920x6008x3008, and 1025^3 vs 1024^3.

Every timed row carries the conditions sampled while it ran and the % of the peak of its
precision at the highest SM clock sampled (lab/peaks.py; as lab.compare's pct_peak column).
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))  # tests/planted/kernel.py: the planted kernel's helper

BUDGET_S = 150.0  # an example that would start later than this is recorded as skipped
SEED = 0
COLUMNS = ["example", "case", "precision", "M", "N", "K", "method", "status", "median_ms",
           "p20_ms", "p80_ms", "reps", "tflops", "pct_of_cublas", "pct_of_peak", "peak_tflops",
           "rel_err", "lab_check", "naive_check", "naive_mismatches", "nan_fraction",
           "sm_mhz_mean", "sm_mhz_min", "sm_mhz_max", "power_w", "temp_c", "throttle",
           "seconds", "detail"]

rows: list[dict] = []
T0 = time.perf_counter()


# ------------------------------------------------------------------------------------ helpers


def add(**row) -> dict:
    row.setdefault("status", "ok")
    rows.append(row)
    return row


def tflops_of(M, N, K, ms):
    return 2.0 * M * N * K / (ms * 1e-3) / 1e12


def gpu_info():
    import torch

    props = torch.cuda.get_device_properties(0)
    return (props.major, props.minor), props.multi_processor_count


def timed(fn, precision, M, N, K, bench_kwargs=None, timer=None) -> dict:
    """Time `fn` (lab.timing.bench unless `timer` is given) under a clocks.Sampler: the timing
    columns, the conditions, and the % of the peak at the sampled clock."""
    import torch

    from lab import clocks, peaks
    from lab.timing import bench

    with clocks.Sampler() as sampler:
        t = timer() if timer else bench(fn, **(bench_kwargs or {}))
        torch.cuda.synchronize()
    cond = sampler.conditions
    out = {"precision": precision, "M": M, "N": N, "K": K, "median_ms": t.median_ms,
           "p20_ms": t.p20_ms, "p80_ms": t.p80_ms, "reps": t.reps,
           "tflops": tflops_of(M, N, K, t.median_ms), "sm_mhz_mean": cond.sm_mhz_mean,
           "sm_mhz_min": cond.sm_mhz_min, "sm_mhz_max": cond.sm_mhz_max, "power_w": cond.power_w,
           "temp_c": cond.temp_c, "throttle": cond.throttle}
    cc, sms = gpu_info()
    # the peak at the highest clock sampled, as lab.compare's peak_gflops (docs/COLUMNS.md)
    pk = peaks.peak(precision, cc, sms, cond.sm_mhz_max or clocks.max_sm_mhz() or 0)
    if pk is not None:
        out["peak_tflops"] = pk.tflops
        out["pct_of_peak"] = 100.0 * out["tflops"] / pk.tflops
    return out


def warm_timer(fn, reps: int, per_launch: bool):
    """No L2 flush, launches back to back. per_launch: an event pair around each launch (median);
    else one pair around all `reps` launches (mean)."""
    import torch

    from lab.timing import Timing, quantiles

    def run():
        for _ in range(20):  # warm-up: operands now sit in L2 (when they fit)
            fn()
        torch.cuda.synchronize()
        if per_launch:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(reps)]
            for s, e in ev:
                s.record()
                fn()
                e.record()
            torch.cuda.synchronize()
            p20, med, p80 = quantiles([s.elapsed_time(e) for s, e in ev])
            return Timing(med, p20, p80, reps)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            fn()
        e.record()
        torch.cuda.synchronize()
        mean = s.elapsed_time(e) / reps
        return Timing(mean, mean, mean, reps)

    return run


def set_fp32(mode: str) -> None:
    """cuBLAS fp32 precision: 'ieee' (TF32 off, the lab's fp32) or 'tf32'."""
    import torch

    flags = torch.backends.cuda.matmul
    if hasattr(flags, "fp32_precision"):
        flags.fp32_precision = mode
    else:  # older torch
        flags.allow_tf32 = mode == "tf32"


def cublas(a, b, c):
    import torch

    return lambda: torch.matmul(a, b, out=c)


def free():
    import gc

    import torch

    gc.collect()
    torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------ examples


def example_i():
    """The planted kernel vs cuBLAS fp32 at 4096^3."""
    import torch

    from lab import check as chk
    from planted import kernel as planted

    n = 4096
    set_fp32("ieee")
    a, b = chk.make_inputs(n, n, n, SEED, "cuda")
    ref = chk.reference(a, b)
    c = torch.empty(n, n, device="cuda")
    base = add(example="i", case="cublas_fp32", method="flushed", **timed(cublas(a, b, c), "fp32", n, n, n))
    res = chk.check(cublas(a, b, c), c, ref, n)
    base.update(rel_err=res.rel_err, lab_check="pass" if res.passed else "fail: " + res.reason)
    for case, acc in (("planted_zero_registers", planted.ACC_DEFECT),
                      ("planted_fixed_acc128", planted.ACC_FIXED)):
        launch = planted.launcher(a, b, c, acc=acc)
        res = chk.check(launch, c, ref, n)  # NaN-poisoned C, one launch
        mismatches = planted.naive_mismatches(c, ref)
        nan_fraction = torch.isnan(c).float().mean().item()
        row = timed(launch, "fp32", n, n, n)  # what a timing-only harness would report
        add(example="i", case=case, method="flushed", **row,
            pct_of_cublas=100.0 * base["median_ms"] / row["median_ms"], rel_err=res.rel_err,
            lab_check="pass" if res.passed else "fail: " + res.reason,
            naive_check="pass" if mismatches == 0 else "fail",
            naive_mismatches=mismatches, nan_fraction=nan_fraction,
            detail=f"ACC={acc}; the lab's run machinery times only rows that pass its check")
    del a, b, c, ref
    free()


def example_ii():
    """cuBLAS at 4096^3: TF32 allowed vs IEEE fp32."""
    import torch

    from lab import check as chk

    n = 4096
    a, b = chk.make_inputs(n, n, n, SEED, "cuda")
    ref = chk.reference(a, b)
    c = torch.empty(n, n, device="cuda")
    try:
        for mode, precision in (("ieee", "fp32"), ("tf32", "tf32")):
            set_fp32(mode)
            res32 = chk.check(cublas(a, b, c), c, ref, n, "fp32")
            res_tf = chk.compare(c, ref, n, "tf32")
            row = timed(cublas(a, b, c), precision, n, n, n)
            add(example="ii", case=f"cublas_{mode}", method="flushed", **row, rel_err=res32.rel_err,
                lab_check=("pass" if res32.passed else "fail") + " (fp32 threshold "
                          f"{chk.tolerance('fp32', n):.0e}); "
                          + ("pass" if res_tf.passed else "fail") + " (tf32 threshold "
                          f"{chk.tolerance('tf32', n):.0e})",
                detail="torch.backends.cuda.matmul fp32 precision = " + mode)
        ieee, tf32 = rows[-2], rows[-1]
        tf32["pct_of_cublas"] = 100.0 * ieee["median_ms"] / tf32["median_ms"]
        tf32["detail"] += (f"; {tf32['pct_of_cublas'] / 100:.1f}x the IEEE fp32 speed at "
                           f"{tf32['rel_err'] / ieee['rel_err']:.0f}x its error")
    finally:
        set_fp32("ieee")
    del a, b, c, ref
    free()


def example_iii():
    """L2 warm (no flush, back to back) vs flushed (lab.timing.bench)."""
    import torch

    from lab import check as chk
    from lab.stages import Variant, get_stage

    set_fp32("ieee")
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", None)
    l2_mib = f"{l2 / 2**20:.0f} MiB" if l2 else "size unknown"
    cases = [("cublas_fp32", 1024), ("cublas_fp32", 2048), ("vectorized_cuda", 1024)]
    for case, n in cases:
        a, b = chk.make_inputs(n, n, n, SEED, "cuda")
        c = torch.empty(n, n, device="cuda")
        if case == "cublas_fp32":
            fn = cublas(a, b, c)
        else:
            spec = get_stage("vectorized")
            fn = spec.module("cuda").prepare(a, b, c, **Variant(spec, spec.defaults())
                                             .params_for("cuda"))
            res = chk.check(fn, c, chk.reference(a, b), n)
            if not res.passed:
                raise RuntimeError(f"vectorized failed its check at {n}: {res.reason}")
        flushed = add(example="iii", case=case, method="flushed (lab.timing.bench)",
                      **timed(fn, "fp32", n, n, n))
        for method, per_launch in (("warm, events per launch", True),
                                   ("warm, one event pair around 200", False)):
            row = timed(fn, "fp32", n, n, n, timer=warm_timer(fn, 200, per_launch))
            add(example="iii", case=case, method=method, **row,
                detail=f"{100.0 * (flushed['median_ms'] / row['median_ms'] - 1):+.1f}% "
                       f"TFLOPS vs flushed; A, B and C take {3 * n * n * 4 / 2**20:.0f} MiB, "
                       f"the L2 {l2_mib}")
        del a, b, c, fn
        free()


def example_iv():
    """Two bursts of cuBLAS bf16 4096^3, ~20 s apart, 15 s of bf16 8192^3 GEMMs between."""
    import torch

    from lab import check as chk, clocks

    n, big, load_s = 4096, 8192, 15.0
    a, b = chk.make_inputs(n, n, n, SEED, "cuda", dtype=torch.bfloat16)
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    x, y = chk.make_inputs(big, big, big, SEED + 1, "cuda", dtype=torch.bfloat16)
    z = torch.empty(big, big, device="cuda", dtype=torch.bfloat16)
    time.sleep(5.0)  # idle first, so that the first burst starts from a cooler GPU
    start = time.perf_counter()
    add(example="iv", case="burst_1", method="flushed", seconds=0.0,
        **timed(cublas(a, b, c), "bf16", n, n, n, {"rep_ms": 1000.0, "max_reps": 5000}))
    count = 0
    with clocks.Sampler() as sampler:
        t_load = time.perf_counter()
        while time.perf_counter() - t_load < load_s:
            for _ in range(10):
                torch.matmul(x, y, out=z)
            count += 10
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t_load
    cond = sampler.conditions
    add(example="iv", case="sustained_load", precision="bf16", M=big, N=big, K=big,
        method=f"{count} GEMMs back to back", seconds=time.perf_counter() - start - elapsed,
        tflops=count * 2.0 * big**3 / elapsed / 1e12, sm_mhz_mean=cond.sm_mhz_mean,
        sm_mhz_min=cond.sm_mhz_min, sm_mhz_max=cond.sm_mhz_max, power_w=cond.power_w,
        temp_c=cond.temp_c, throttle=cond.throttle, detail=f"{elapsed:.1f} s of load")
    add(example="iv", case="burst_2", method="flushed", seconds=time.perf_counter() - start,
        **timed(cublas(a, b, c), "bf16", n, n, n, {"rep_ms": 1000.0, "max_reps": 5000}))
    b1, b2 = [r for r in rows if r.get("example") == "iv" and r["case"].startswith("burst")]
    b2["pct_of_cublas"] = 100.0 * b1["median_ms"] / b2["median_ms"]
    b2["detail"] = "pct_of_cublas = burst 2's speed as a % of burst 1's (same kernel, same shape)"
    del a, b, c, x, y, z
    free()


def example_v():
    """cuBLAS bf16 on unaligned vs aligned shapes."""
    import torch

    from lab import check as chk

    pairs = [((7919, 6007, 3001), (7920, 6008, 3008)), ((1025, 1025, 1025), (1024, 1024, 1024))]
    for odd, even in pairs:
        got = {}
        for shape in (odd, even):
            M, N, K = shape
            a, b = chk.make_inputs(M, N, K, SEED, "cuda", dtype=torch.bfloat16)
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            fn = cublas(a, b, c)
            fn()
            ref = chk.reference(a, b)
            res = chk.compare(c.float(), ref, K, "bf16")
            got[shape] = add(example="v", case="cublas_bf16", method="flushed", **timed(
                fn, "bf16", M, N, K), rel_err=res.rel_err,
                lab_check="pass" if res.passed else "fail: " + res.reason,
                detail=f"rows of A {2 * K} bytes, of B {2 * N} bytes: "
                       + ("16-byte aligned" if K % 8 == 0 and N % 8 == 0
                          else "not 16-byte aligned"))
            del a, b, c, ref
            free()
        o, e = got[odd], got[even]
        o["detail"] += f"; {e['tflops'] / o['tflops']:.1f}x fewer TFLOPS than {'x'.join(map(str, even))}"


EXAMPLES = [("iv", example_iv), ("i", example_i), ("ii", example_ii), ("iii", example_iii),
            ("v", example_v)]  # the clock swing first: the first burst then finds the GPU coolest


# ------------------------------------------------------------------------------------ main


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def summary() -> None:
    print(f"\n{'ex':<4} {'case':<24} {'shape':<16} {'method':<33} {'ms':>8} {'TFLOPS':>8} "
          f"{'%cuBLAS':>8} {'%peak':>6} {'MHz':>6}  check")
    for r in sorted(rows, key=lambda r: ["i", "ii", "iii", "iv", "v"].index(r["example"])
                    if r.get("example") in ("i", "ii", "iii", "iv", "v") else 9):
        shape = f"{r.get('M')}x{r.get('N')}x{r.get('K')}" if r.get("M") else "-"
        check = (r.get("lab_check") or "")[:40]
        if r.get("naive_check"):
            check += f" | naive: {r['naive_check']}"
        if r["status"] != "ok":
            check = f"{r['status']}: {r.get('detail', '')}"[:100]
        print(f"{r.get('example', '?'):<4} {r.get('case', '')[:24]:<24} {shape:<16} "
              f"{(r.get('method') or '')[:33]:<33} {fmt(r.get('median_ms'), '.4f'):>8} "
              f"{fmt(r.get('tflops'), '.1f'):>8} {fmt(r.get('pct_of_cublas'), '.1f'):>8} "
              f"{fmt(r.get('pct_of_peak'), '.0f'):>6} {fmt(r.get('sm_mhz_mean'), '.0f'):>6}  "
              f"{check}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python scripts/trust_measure.py OUT_DIR", file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("error: trust_measure.py measures on a CUDA GPU and none is visible to torch",
              file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    timings = {}
    for name, fn in EXAMPLES:
        began = time.perf_counter()
        if began - T0 > BUDGET_S:
            add(example=name, case="-", status="skipped",
                detail=f"not started: {began - T0:.0f} s were already spent (budget {BUDGET_S:.0f} s)")
            continue
        print(f"example ({name}): {fn.__doc__}", flush=True)
        try:
            fn()
        except Exception as exc:
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            add(example=name, case="-", status="error",
                detail=f"{type(exc).__name__}: {exc} at {Path(frame.filename).name}:{frame.lineno}")
            traceback.print_exc()
            free()
        timings[name] = round(time.perf_counter() - began, 1)
    set_fp32("ieee")
    csv_path = out / "trust.csv"
    with open(csv_path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: r.get(k) for k in COLUMNS})
    from lab import env

    info = env.collect("gpu", SEED)
    info["script"] = "scripts/trust_measure.py"
    info["example_seconds"] = timings
    info["total_seconds"] = round(time.perf_counter() - T0, 1)
    (out / "trust.env.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str)
                                        + "\n")
    summary()
    bad = [r for r in rows if r["status"] != "ok"]
    print(f"\nwrote {csv_path} ({len(rows)} rows, {len(bad)} error/skipped) and "
          f"{out / 'trust.env.json'} in {info['total_seconds']:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
