"""--sass and --ptx: each kernel compiled (never launched) as its launcher builds it, CUDA through
NVRTC and Triton through its compiler (lab.profiling.triton_capture); the listings, the static
instruction counts under them (SASS through lab/ncu.py, PTX through PTX_MIX), the resources and
theoretical occupancy read off the cubin, and the mix CSV."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from lab.base.errors import LabError
from lab.profiling.triton_capture import _triton_compile


def _cuda_sass(build) -> str:
    try:  # lab/toolchain/sass.py, where this checkout has it
        from lab.toolchain.sass import sass as sass_of_build
    except ImportError:
        sass_of_build = None
    if sass_of_build is not None:
        from lab.ncu import clean_sass

        return clean_sass(sass_of_build(build))
    from lab.ncu import sass_of_cubin

    return sass_of_cubin(build.cubin)


PTX_MIX = (
    ("fma.rn.f32", r"^\s*(?:@!?%p\d+\s+)?fma\.rn(?:\.ftz)?\.f32"),
    ("ld.global (scalar)", r"^\s*(?:@!?%p\d+\s+)?ld\.global(?![.a-z0-9]*\.v[24]\.)[.a-z0-9]*\.(?:f32|b32|u32)\s"),
    ("ld.global.v2", r"^\s*(?:@!?%p\d+\s+)?ld\.global[.a-z0-9]*\.v2"),
    ("ld.global.v4", r"^\s*(?:@!?%p\d+\s+)?ld\.global[.a-z0-9]*\.v4"),
    ("ld.shared", r"^\s*(?:@!?%p\d+\s+)?ld\.shared"),
    ("st.shared", r"^\s*(?:@!?%p\d+\s+)?st\.shared"),
    ("st.global", r"^\s*(?:@!?%p\d+\s+)?st\.global"),
    ("cp.async", r"^\s*(?:@!?%p\d+\s+)?cp\.async"),
    ("bar.sync", r"^\s*(?:@!?%p\d+\s+)?(?:bar\.sync|barrier\.sync)"),
    ("mma/wgmma", r"^\s*(?:@!?%p\d+\s+)?(?:mma|wgmma)\."),
)


def ptx_counts(ptx: str) -> dict[str, int]:
    """Static counts of the PTX_MIX instructions in a PTX listing."""
    import re

    counts = {}
    for label, pattern in PTX_MIX:
        rx = re.compile(pattern)
        counts[label] = sum(1 for ln in ptx.splitlines() if rx.match(ln))
    return counts


def ptx_mix(ptx: str) -> str:
    counts = ptx_counts(ptx)
    shown = [f"{label} {n}" for label, n in counts.items()
             if n or label in ("fma.rn.f32", "ld.shared", "bar.sync")]
    return "PTX mix (static count in the listing): " + ", ".join(shown)


@dataclass
class Listing:
    """One kernel compiled (never launched) for this shape: its listings, resources and mixes."""

    label: str
    backend: str  # cuda | triton
    params: str
    kernel: str
    compiled_for: str  # e.g. "sm_90 (NVRTC)"
    head: str  # the banner line over a listing
    precision: str = "fp32"
    ptx: str | None = None
    sass: str | None = None
    # threads, grid_blocks, registers, smem_static, smem_dynamic, local_bytes
    resources: dict | None = None
    occupancy: object | None = None  # lab.occupancy.Occupancy

    @cached_property
    def sass_mix(self) -> dict[str, int] | None:
        from lab.ncu import mix_counts

        return None if self.sass is None else mix_counts(self.sass)


def cubin_usage(cubin: bytes, kernel: str) -> dict[str, int]:
    """`cuobjdump --dump-resource-usage` of one function: REG, SHARED (static, including the
    1 KiB the driver reserves), LOCAL (bytes per thread: stack and spills)."""
    import re

    from lab.ncu import require_tool

    tool = require_tool("cuobjdump", "it is needed to read a kernel's resource usage")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        res = subprocess.run([tool, "--dump-resource-usage", str(path)], capture_output=True,
                             text=True)
    text = res.stdout or ""
    usage: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        head = re.match(r"\s*Function\s+([^:\s]+)\s*:", line)
        if head:
            current = head.group(1)
            continue
        if current is not None and (current == kernel or not usage):
            fields = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\d+)", line))
            if "REG" in fields:
                usage = {k: int(v) for k, v in fields.items()}
                if current == kernel:
                    break
    if res.returncode != 0 or "REG" not in usage:
        raise LabError(f"cuobjdump could not read the resource usage of {kernel} (exit status "
                       f"{res.returncode})")
    return usage


def compile_listing(v, backend: str, shape, sass: bool, ptx: bool,
                    resources: bool = False, precision: str = "fp32") -> Listing:
    """Compile one stage variant for one backend at this shape and precision, as its launcher
    would, without a GPU if need be (CUDA: NVRTC for the device or sm_90, the build of
    `precision` where the launcher has one per precision; Triton: see _triton_compile).
    resources=True also reads the registers, shared and local memory, and the theoretical
    occupancy on this GPU's limits (sm_90's without one)."""
    from lab.occupancy import from_device, from_resources

    params = ",".join(f"{k}={val}" for k, val in v.params_for(backend).items())
    if backend == "cuda":
        from lab.toolchain.nvrtc import resources as cuda_resources

        build, geometry = v.stage.offer("cuda").compile(v.params_for("cuda"), *shape, "nn",
                                                        precision)
        item = Listing(v.label, "cuda", params, build.kernel, f"{build.arch} (NVRTC)",
                       f"{v.label} cuda {build.kernel} ({build.arch}, NVRTC, {precision})",
                       precision=precision)
        if ptx:
            from lab.toolchain.ptx import ptx as ptx_of_build

            item.ptx = ptx_of_build(build)
        if sass:
            item.sass = _cuda_sass(build)
        if resources:
            res = cuda_resources(build, *geometry)
            usage = cubin_usage(build.cubin, build.kernel)
            item.resources = {**res, "local_bytes": usage.get("LOCAL", 0)}
    else:
        compiled, where, grid = _triton_compile(v, shape, precision)
        name = getattr(compiled.metadata, "name", v.label)
        target = getattr(compiled.metadata, "target", None)
        arch = f"sm_{target.arch}" if getattr(target, "arch", None) else "?"
        item = Listing(v.label, "triton", params, name, f"{arch} (Triton)",
                       f"{v.label} triton {name} (Triton, {where}, specialised for {shape}, "
                       f"{precision})", precision=precision)
        if ptx:
            item.ptx = compiled.asm.get("ptx")
        cubin = compiled.asm.get("cubin") if (sass or resources) else None
        if (sass or resources) and not cubin:
            raise LabError(f"Triton produced no cubin for {v.label}")
        if sass:
            from lab.ncu import sass_of_cubin

            item.sass = sass_of_cubin(cubin)
        if resources:
            usage = cubin_usage(cubin, name)
            blocks = 1
            for g in grid:
                blocks *= int(g)
            item.resources = {
                "registers": usage["REG"],
                "smem_static": 0,  # Triton allocates all shared memory dynamically
                "smem_dynamic": int(getattr(compiled.metadata, "shared", 0)),
                "threads": int(getattr(compiled.metadata, "num_warps", 4)) * 32,
                "grid_blocks": blocks,
                "local_bytes": usage.get("LOCAL", 0),
            }
    if item.resources is not None:
        try:
            item.occupancy = from_resources(item.resources, from_device())
        except ValueError:  # a configuration no launch could have: leave it blank
            item.occupancy = None
    return item


def mix_csv_rows(items: list[Listing], shape) -> list[dict]:
    """One row per kernel: identity, resources, occupancy, then sass:* and ptx:* counts."""
    from lab.ncu import MIX_ROWS

    rows = []
    for it in items:
        res = it.resources or {}
        occ = it.occupancy
        row = {"stage": it.label, "backend": it.backend, "precision": it.precision,
               "params": it.params,
               "M": shape.M, "N": shape.N, "K": shape.K, "kernel": it.kernel,
               "compiled_for": it.compiled_for}
        for key in ("threads", "grid_blocks", "registers", "smem_static", "smem_dynamic",
                    "local_bytes"):
            row[key] = res.get(key)
        row["blocks_per_sm"] = occ.blocks_per_sm if occ else None
        row["occupancy_pct"] = round(100 * occ.occupancy, 2) if occ else None
        row["occupancy_limiter"] = occ.limiter if occ else None
        mix = it.sass_mix
        if mix is not None:
            row.update({f"sass:{label}": mix[label] for label, _, _ in MIX_ROWS})
            row["sass:total"] = mix["total"]
        if it.ptx is not None:
            row.update({f"ptx:{label}": n for label, n in ptx_counts(it.ptx).items()})
        rows.append(row)
    return rows


def write_mix_csv(items: list[Listing], shape, path: str) -> Path:
    import pandas as pd

    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame(mix_csv_rows(items, shape)).to_csv(out, index=False)
    except OSError as exc:
        raise LabError(f"cannot write {out}: {exc.strerror}") from None
    return out


def show_listings(pairs, shape, sass: bool, ptx: bool, csv: str | None = None,
                  precision: str = "fp32") -> int:
    """--sass/--ptx: each (variant, backend) pair of runnable() compiled in `precision`."""
    from lab.ncu import format_mix, mix_counts

    items = []
    for v, backend in pairs:
        item = compile_listing(v, backend, shape, sass, ptx, resources=bool(csv),
                               precision=precision)
        items.append(item)
        if item.ptx is not None:
            print(f"// ===== PTX: {item.head} =====")
            print(item.ptx.rstrip())
            print(f"// {ptx_mix(item.ptx)}")
        if item.sass is not None:
            print(f"// ===== SASS: {item.head} =====")
            print(item.sass.rstrip())
            print(f"// {format_mix(mix_counts(item.sass))}")
        sys.stdout.flush()
    if csv:
        # stderr: the mix stays the last line of stdout (`| tail -1` shows it)
        print(f"wrote {write_mix_csv(items, shape, csv)}", file=sys.stderr)
    return 0
