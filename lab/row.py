"""Results are structured rows: the Row record, one per measurement, and its statuses.

Every column of the CSV and of the table is a Row field, explained in docs/COLUMNS.md
(tests/test_table.py checks that each is). The computed columns (GFLOPS, % of cuBLAS, the noise
bands, GB/s and % of the measured HBM read bandwidth) are filled by lab/computed.py, never by a stage; the medians over repeats by
lab/repeats.py. One writer puts rows out: lab/csvfile.py (the CSV and its environment file) and
lab/table.py (the terminal table).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

# Statuses: pass (checked, and timed on a GPU), fail (wrong values; not timed), error (could not
# build or run), invalid (timed faster than the GPU's peak for its precision at the measured clock:
# not a speed, see lab/peaks.py), compiled (CPU mode: CUDA source compiled, resources reported,
# not run), skipped (CPU mode: a Triton row larger than the interpreter's limit; `detail` says so).
OK_STATUSES = ("pass", "compiled", "skipped")


@dataclass
class Row:
    stage: str  # the variant label, e.g. "tiled" or "tiled:tile=16"; "cublas" for the baseline
    backend: str  # cublas | cuda | triton
    precision: str
    M: int
    N: int
    K: int
    layout: str = "nn"  # BLAS naming: first letter A, second B; t = stored transposed
    model: str = ""  # a shape suite's model (--sizes llm: "Llama-2-7B"); empty for a plain size
    layer: str = ""  # that model's layer ("qkv"); several joined by " / " (lab/suites.py)
    dtype: str = "float32"  # torch dtype of A, B and C (fp32 accumulation in every precision)
    status: str = "pass"
    detail: str = ""
    mode: str = "gpu"
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    reps: int | None = None
    gflops: float | None = None
    pct_cublas: float | None = None
    pct_cublas_lo: float | None = None  # the noise band of pct_cublas: from p20/p80 of the row and
    pct_cublas_hi: float | None = None  # of its adjacent cuBLAS timing (min/max over --repeat)
    cublas_ms: float | None = None  # median of the cuBLAS call timed beside this row (adjacent)
    cublas_timing: str = ""  # adjacent (interleaved with this row) | once (one row per shape)
    peak_gflops: float | None = None  # the GPU's peak for this precision at sm_mhz_max
    pct_peak: float | None = None  # 100 * gflops / peak_gflops
    gbps: float | None = None  # the least bytes the product moves (A, B read and C written once)
    # over median_ms, GB/s
    pct_hbm: float | None = None  # 100 * gbps / hbm_read_gbps
    hbm_read_gbps: float | None = None  # the GPU's DRAM read bandwidth measured for the run, GB/s
    sm_mhz_mean: float | None = None  # SM clock sampled by NVML while the row was timed
    sm_mhz_min: float | None = None
    sm_mhz_max: float | None = None
    power_w: float | None = None  # mean board power over the same samples
    temp_c: float | None = None  # highest GPU temperature over the same samples
    throttle: str = ""  # clock-event reasons NVML reported in any sample ('+'-joined)
    clock_samples: int | None = None
    repeat: int | None = None  # --repeat: which repetition of the plan (0-based)
    vs_baseline_pct: float | None = None  # --baseline: 100 * (t / t_baseline - 1), + = slower
    rel_err: float | None = None
    max_err_k: float | None = None
    setup_ms: float | None = None  # one-time work in prepare() worth knowing (e.g. padding)
    e2e_ms: float | None = None  # --include-transfers: H2D copies + kernel + D2H copy
    transfer_ms: float | None = None  # e2e_ms - median_ms
    api_ms: float | None = None  # --api: median GPU-visible time of the lab.matmul call
    api_us: float | None = None  # --api: CPU time per lab.matmul call, its plan cached
    # (cuBLAS rows: per torch.matmul call)
    prepare_us: float | None = None  # --api: CPU time of one prepare() call of the stage
    api_ratio: float | None = None  # --api: api_ms / the prepared launch, timed interleaved
    registers: int | None = None
    smem_static: int | None = None
    smem_dynamic: int | None = None
    spill_bytes: int | None = None
    threads: int | None = None
    grid_blocks: int | None = None
    blocks_by_warps: int | None = None  # blocks/SM each limit allows (None: no such limit)
    blocks_by_regs: int | None = None
    blocks_by_smem: int | None = None
    blocks_per_sm: int | None = None  # theoretical: the smallest of the limits above and the
    # hardware's blocks-per-SM maximum
    occupancy: float | None = None  # theoretical: active warps / max warps per SM
    occupancy_limiter: str | None = None
    api_blocks_per_sm: int | None = None  # the CUDA occupancy API's answer (CUDA rows, GPU mode)
    params: str = ""
    seed: int | None = None
    # a run over several GPUs (--gpus, torchrun; lab/ranks.py): the rank that ran the row and
    # the GPU it ran on (its CUDA index on its host, name, UUID); empty on a run of one process
    rank: int | None = None
    gpu_index: int | None = None
    gpu_name: str = ""
    gpu_uuid: str = ""

    def set_resources(self, res: dict | None) -> None:
        for key, value in (res or {}).items():
            if key in ROW_FIELDS:
                setattr(self, key, value)

    def set_conditions(self, cond) -> None:
        """Copy a lab.clocks.Conditions (what NVML sampled while the row was timed)."""
        self.sm_mhz_mean, self.sm_mhz_min, self.sm_mhz_max = (cond.sm_mhz_mean, cond.sm_mhz_min,
                                                              cond.sm_mhz_max)
        self.power_w, self.temp_c, self.throttle = cond.power_w, cond.temp_c, cond.throttle
        self.clock_samples = cond.samples or None


ROW_FIELDS = {f.name for f in fields(Row)}
