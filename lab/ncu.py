"""Nsight Compute plumbing: the metric list, the command line, the raw CSV parser, and SASS tools.

Nothing here runs a kernel. `lab.profile` builds a target command, hands it to `ncu_command`, runs
it, and feeds ncu's `--csv --page raw` output to `parse_raw_csv` and `kernel_columns`.

The raw page has one header row of column names ("ID", "Process ID", "Process Name", "Host Name",
"Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC", then one column per
metric), one row of units (empty under the ID columns), then one row per profiled kernel. Values
may carry thousands separators ("1,073,741,824") and "n/a"; units may be scaled ("usecond",
"Mbyte", "cycle/nsecond") unless `--print-units base` was given. `parse_value` brings every value
to base units (byte, second, hertz, percent, counts).

Only the metrics the table needs are requested (no sections), so a run takes a few replay passes.
Metric names are those of Nsight Compute 2025.x (CUDA 13) on sm_90; a name this ncu does not know
is reported by ncu as "Failed to find metric ...", dropped by `lab.profile`, and shown as n/a.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from lab.base.errors import LabError

# ------------------------------------------------------------------------------------- metrics

# table column -> ncu metric (raw name, with its rollup/suffix)
METRICS: dict[str, str] = {
    "duration": "gpu__time_duration.sum",
    "sm_clock": "sm__cycles_elapsed.avg.per_second",
    "occupancy_achieved": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "occupancy_theoretical": "sm__maximum_warps_per_active_cycle_pct",
    "sm_throughput": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_throughput": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "l1_hit": "l1tex__t_sector_hit_rate.pct",
    "l2_hit": "lts__t_sector_hit_rate.pct",
    "gld_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "gld_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "gst_sectors": "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "gst_requests": "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "smem_ld_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "smem_st_wavefronts": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smem_ld_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smem_st_conflicts": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "dram_read": "dram__bytes_read.sum",
    "dram_write": "dram__bytes_write.sum",
}

# Warp stall reasons, as % of the cycles a warp was active (smsp__warp_issue_stalled_<r>_per_warp_
# active.pct: the hardware-counter form, no PC sampling needed; present since Volta). "selected"
# is the warp that issued, not a stall: collected so the reasons add up, left out of the top 3.
STALL_REASONS = (
    "barrier", "branch_resolving", "dispatch_stall", "drain", "imc_miss", "lg_throttle",
    "long_scoreboard", "math_pipe_throttle", "membar", "mio_throttle", "misc", "no_instruction",
    "not_selected", "selected", "short_scoreboard", "sleeping", "tex_throttle", "wait",
)
NOT_A_STALL = ("selected",)


def stall_metric(reason: str) -> str:
    return f"smsp__warp_issue_stalled_{reason}_per_warp_active.pct"


_STALL_RE = re.compile(r"^smsp__warp_issue_stalled_(\w+?)_per_warp_active\.pct$")


def metric_list() -> list[str]:
    return [*METRICS.values(), *(stall_metric(r) for r in STALL_REASONS)]


# ----------------------------------------------------------------------------------------- tools


def _pip_cuda_bin() -> Path | None:
    """site-packages/nvidia/cu13/bin, where the nvidia-cuda-cuobjdump/-nvdisasm wheels put tools."""
    try:
        import nvidia

        return Path(list(nvidia.__path__)[0]) / "cu13" / "bin"
    except Exception:  # pragma: no cover - wheels not installed
        return None


def find_tool(name: str) -> str | None:
    """A CUDA command-line tool: $PATH, then the pip wheels' bin, then /usr/local/cuda/bin.

    `LAB_<NAME>` (e.g. LAB_NCU=/opt/nsight/ncu) overrides the search."""
    override = os.environ.get(f"LAB_{name.upper().replace('-', '_')}")
    if override:
        return override if Path(override).exists() else None
    found = shutil.which(name)
    if found:
        return found
    for folder in (_pip_cuda_bin(), Path("/usr/local/cuda/bin")):
        if folder is not None and (folder / name).is_file() and os.access(folder / name, os.X_OK):
            return str(folder / name)
    return None


def require_tool(name: str, why: str) -> str:
    path = find_tool(name)
    if path is None:
        hint = {
            "ncu": "install Nsight Compute (it ships with the CUDA toolkit) or point LAB_NCU at it",
            "cuobjdump": "pip install nvidia-cuda-cuobjdump (a project dependency)",
            "nvdisasm": "pip install nvidia-cuda-nvdisasm (a project dependency)",
            "compute-sanitizer": "it ships with the CUDA toolkit",
        }.get(name, "install it")
        raise LabError(f"{name} was not found on PATH, in the venv's nvidia/cu13/bin or in "
                       f"/usr/local/cuda/bin, and {why}; {hint}")
    return path


# --------------------------------------------------------------------------------- command line

NVTX_RANGE = "lab_profile"  # the push/pop range the target wraps its one profiled launch in


def ncu_command(ncu: str, target: list[str], kernel_filter: str, metrics: list[str],
                report: str | None = None, nvtx: bool = True, launch_skip: int = 0) -> list[str]:
    """The ncu command that profiles exactly one launch of `kernel_filter` in `target`.

    nvtx=True: only launches inside the target's NVTX push/pop range `lab_profile` count (the
    target launches the kernel once there, after its warm-up), which also isolates cuBLAS, whose
    kernel names vary. nvtx=False: skip `launch_skip` matching launches (the warm-ups) instead.
    Clocks are never locked (--clock-control none): the kernel runs at the clocks lab.compare
    timed it at.
    """
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all",
           "--metrics", ",".join(metrics), "--kernel-name", kernel_filter]
    if nvtx:
        cmd += ["--nvtx", "--nvtx-include", f"{NVTX_RANGE}/"]
    else:
        cmd += ["--launch-skip", str(launch_skip)]
    cmd += ["--launch-count", "1"]
    if report:
        cmd += ["--export", report, "--force-overwrite"]
    else:
        cmd += ["--csv", "--page", "raw", "--print-units", "base"]
    return cmd + list(target)


def import_command(ncu: str, report: str) -> list[str]:
    """Turn a saved report into the raw CSV page, every value in base units."""
    return [ncu, "--import", report, "--csv", "--page", "raw", "--print-units", "base"]


NO_KERNELS = "No kernels were profiled"
_UNKNOWN_METRIC = re.compile(r"Failed to find metric\s+(?:regex:)?\^?([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)")


def unknown_metrics(output: str, requested: list[str]) -> list[str]:
    """The requested metrics ncu said it does not know ("==ERROR== Failed to find metric X")."""
    bad = []
    for m in _UNKNOWN_METRIC.finditer(output):
        name = m.group(1)
        for req in requested:
            # ncu may echo the full name or only its base (before the first '.')
            if req == name or req.split(".")[0] == name.split(".")[0]:
                if req not in bad:
                    bad.append(req)
    return bad


def tail(text: str, lines: int = 12) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])


# ------------------------------------------------------------------------------------ raw CSV

ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
              "Block Size", "Grid Size", "Device", "CC")

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "m": 1e-3, "u": 1e-6, "n": 1e-9, "p": 1e-12}
_BASES = ("second", "byte", "hz", "cycle", "inst", "sector", "request", "warp", "thread",
          "wavefront", "block", "register", "transaction")


_SHORT_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _unit_scale(unit: str) -> tuple[float, str]:
    """('usecond' -> 1e-6, 'second'); ('Mbyte' -> 1e6, 'byte'); ('%' -> 1, '%')."""
    unit = unit.strip()
    if not unit or unit == "%":
        return 1.0, unit
    if "/" in unit:  # e.g. cycle/nsecond, Gbyte/second
        num, den = unit.split("/", 1)
        sn, bn = _unit_scale(num)
        sd, bd = _unit_scale(den)
        return sn / sd, f"{bn}/{bd}"
    if unit in _SHORT_TIME:  # ncu prints durations as "ns" even with --print-units base
        return _SHORT_TIME[unit], "second"
    low = unit.lower()
    for base in _BASES:
        if low.endswith(base):
            prefix = unit[: len(unit) - len(base)]
            if prefix in _PREFIX:
                return _PREFIX[prefix], base
            if prefix.upper() in ("K", "M", "G", "T"):  # "Khz", "kbyte"
                return _PREFIX[prefix.upper()], base
    return 1.0, unit


def parse_value(text: str, unit: str = "") -> float | None:
    """'1,234.5' with unit 'usecond' -> 0.0012345 (seconds). 'n/a' or '' -> None."""
    t = (text or "").strip().replace(",", "").replace("\u202f", "").replace(" ", "")
    if not t or t.lower() in ("n/a", "na", "nan", "-"):
        return None
    try:
        value = float(t)
    except ValueError:
        return None
    scale, _ = _unit_scale(unit)
    return value * scale


@dataclass
class NcuKernel:
    """One row of the raw page: a profiled kernel launch."""

    id: str
    kernel: str
    block: str
    grid: str
    cc: str
    values: dict[str, float | None]  # metric -> value in base units
    units: dict[str, str]  # metric -> ncu's unit as printed
    raw: dict[str, str] = field(repr=False, default_factory=dict)  # every column as printed

    def get(self, metric: str) -> float | None:
        return self.values.get(metric)


def parse_raw_csv(text: str) -> list[NcuKernel]:
    """ncu `--csv --page raw` output -> one NcuKernel per profiled launch.

    Lines before the header ("==PROF==" messages, the target's own output) and after the rows are
    ignored. Raises LabError when there is no header at all."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith('"ID",')), None)
    if start is None:
        raise LabError("ncu printed no CSV table (no header row starting with \"ID\")")
    body = [ln for ln in lines[start:] if ln.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(body))))
    header = rows[0]
    metric_cols = [c for c in header if c not in ID_COLUMNS]
    units: dict[str, str] = {}
    kernels: list[NcuKernel] = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        rec = dict(zip(header, row))
        if not rec.get("ID", "").strip():  # the units row
            units = {c: rec.get(c, "") for c in metric_cols}
            continue
        values = {c: parse_value(rec[c], units.get(c, "")) for c in metric_cols}
        kernels.append(NcuKernel(
            id=rec["ID"], kernel=rec.get("Kernel Name", ""), block=rec.get("Block Size", ""),
            grid=rec.get("Grid Size", ""), cc=rec.get("CC", ""), values=values,
            units={c: units.get(c, "") for c in metric_cols}, raw=rec,
        ))
    return kernels


# ------------------------------------------------------------------------------------ summary


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den == 0:
        return None
    return num / den


def top_stalls(values: dict[str, float | None], n: int = 3) -> list[tuple[str, float]]:
    """The n largest stall reasons (name, % of active warp cycles), 'selected' excluded."""
    found = []
    for metric, v in values.items():
        m = _STALL_RE.match(metric)
        if m and v is not None and m.group(1) not in NOT_A_STALL:
            found.append((m.group(1), v))
    found.sort(key=lambda x: -x[1])
    return found[:n]


def kernel_columns(k: NcuKernel, M: int, N: int, K: int, peaks) -> dict[str, object]:
    """The table's columns for one kernel (base units in, readable units out).

    FLOPs are the problem's 2*M*N*K (not what the kernel executed); bytes are DRAM bytes read +
    written during the launch (caches are flushed before each replay pass: ncu --cache-control
    all, the default)."""
    from lab import roofline

    v = {name: k.get(metric) for name, metric in METRICS.items()}
    flops = 2.0 * M * N * K
    seconds = v["duration"]
    read, write = v["dram_read"], v["dram_write"]
    dram_bytes = None if read is None or write is None else read + write
    out: dict[str, object] = {
        "kernel": k.kernel,
        "grid": k.grid,
        "block": k.block,
        "duration_ms": None if seconds is None else seconds * 1e3,
        "sm_clock_ghz": None if v["sm_clock"] is None else v["sm_clock"] / 1e9,
        "occupancy_achieved_pct": v["occupancy_achieved"],
        "occupancy_theoretical_pct": v["occupancy_theoretical"],
        "sm_throughput_pct": v["sm_throughput"],
        "dram_throughput_pct": v["dram_throughput"],
        "l1_hit_pct": v["l1_hit"],
        "l2_hit_pct": v["l2_hit"],
        "gld_sectors_per_request": _ratio(v["gld_sectors"], v["gld_requests"]),
        "gst_sectors_per_request": _ratio(v["gst_sectors"], v["gst_requests"]),
        "smem_ld_wavefronts": v["smem_ld_wavefronts"],
        "smem_st_wavefronts": v["smem_st_wavefronts"],
        "smem_ld_bank_conflicts": v["smem_ld_conflicts"],
        "smem_st_bank_conflicts": v["smem_st_conflicts"],
        "flops": flops,
        "achieved_tflops": None if not seconds else flops / seconds / 1e12,
        "dram_bytes": dram_bytes,
        "intensity": None if dram_bytes is None else roofline.intensity(flops, dram_bytes),
    }
    stalls = top_stalls(k.values)
    for i in range(3):
        name, pct = stalls[i] if i < len(stalls) else (None, None)
        out[f"stall_{i + 1}"] = name
        out[f"stall_{i + 1}_pct"] = pct
    out["bound"] = out["pct_of_roof"] = out["attainable_tflops"] = None
    if out["intensity"] is not None and seconds:
        bound, pct = roofline.classify(out["intensity"], flops / seconds, peaks.flops, peaks.bw)
        out["bound"], out["pct_of_roof"] = bound, pct
        out["attainable_tflops"] = roofline.attainable(out["intensity"], peaks.flops,
                                                       peaks.bw) / 1e12
    return out


# --------------------------------------------------------------------------------------- SASS


def sass_of_cubin(cubin: bytes, function: str | None = None) -> str:
    """`cuobjdump --dump-sass` of a cubin, without the hex encodings (one instruction a line)."""
    tool = require_tool("cuobjdump", "it is needed to print SASS")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        cmd = [tool, "--dump-sass"]
        if function:
            cmd += ["--function", function]
        res = subprocess.run(cmd + [str(path)], capture_output=True, text=True)
    if res.returncode != 0:
        raise LabError(f"cuobjdump could not disassemble the cubin: {tail(res.stderr or res.stdout, 3)}")
    return clean_sass(res.stdout)


_ENCODING_ONLY = re.compile(r"^\s*/\*\s*0x[0-9a-f]+\s*\*/\s*$")
_ENCODING_TAIL = re.compile(r"\s*/\*\s*0x[0-9a-f]+\s*\*/\s*$")


def clean_sass(text: str) -> str:
    out = []
    for line in text.splitlines():
        if _ENCODING_ONLY.match(line):
            continue
        out.append(_ENCODING_TAIL.sub("", line).rstrip())
    return "\n".join(out).strip("\n") + "\n"


# An instruction line: "/*0a40*/  @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;"
_INSN = re.compile(r"^\s*/\*[0-9a-fA-F]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)")

# The mix a learner compares between stages: (label, opcode, width or None for any width)
MIX_ROWS = (
    ("FFMA", "FFMA", None),
    ("LDG.E", "LDG", 32), ("LDG.E.64", "LDG", 64), ("LDG.E.128", "LDG", 128),
    ("LDS", "LDS", 32), ("LDS.64", "LDS", 64), ("LDS.128", "LDS", 128),
    ("STS", "STS", None), ("STG", "STG", None),
    ("LDGSTS", "LDGSTS", None), ("LDSM", "LDSM", None),
    ("BAR", "BAR", None), ("HMMA", "HMMA", None), ("HGMMA", "HGMMA", None),
)


def _width(modifiers: list[str]) -> int:
    for mod in modifiers:
        if mod in ("64", "128"):
            return int(mod)
    return 32


def mix_counts(sass: str) -> dict[str, int]:
    """Static counts (instructions in the listing, not executed) of the opcodes in MIX_ROWS.

    LDG/LDS are split by access width: no width modifier = 32 bit, .64, .128 (e.g. LDG.E.128,
    LDG.E.128.CONSTANT, LDS.U.128 all count as 128-bit)."""
    counts = {label: 0 for label, _, _ in MIX_ROWS}
    counts["total"] = 0
    for line in sass.splitlines():
        m = _INSN.match(line)
        if not m:
            continue
        parts = m.group(1).split(".")
        op, mods = parts[0], parts[1:]
        if op == "NOP":
            continue
        counts["total"] += 1
        for label, opcode, width in MIX_ROWS:
            if op == opcode and (width is None or _width(mods) == width):
                counts[label] += 1
    return counts


def format_mix(counts: dict[str, int]) -> str:
    shown = [f"{label} {counts[label]}" for label, _, _ in MIX_ROWS
             if counts.get(label) or label in ("FFMA", "LDG.E", "LDS", "STS", "STG", "BAR")]
    return ("instruction mix (static count in the listing, NOPs excluded; "
            f"{counts['total']} instructions): " + ", ".join(shown))


def fmt_number(value: float | None, digits: int = 3) -> str:
    """Readable number: None -> 'n/a', large counts with SI suffixes."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    a = abs(value)
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= scale:
            return f"{value / scale:.{digits}g}{suffix}"
    return f"{value:.{digits}g}"
