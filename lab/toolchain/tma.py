"""TMA tensor maps and the launch of a kernel that takes them (Hopper, sm_90a).

A TMA load (cp.async.bulk.tensor) reads a box of a global tensor described by a tensor map: 128
opaque bytes that the host encodes with the driver's cuTensorMapEncodeTiled (here through
cuda-bindings, `cuda.bindings.driver`) and passes to the kernel by value, as a
`const __grid_constant__` parameter (cuda_kernels/hopper.cuh: TensorMap). CuPy's kernel call
passes arrays and scalars, not a 128-byte struct, so `TmaLaunch` builds the kernel's parameter
buffer itself and launches through the driver (cuLaunchKernel, through CuPy's binding of it, on
torch's current stream, as lab/toolchain/nvrtc.py's KernelLaunch does).

A map holds the tensor's address, so a launch replayed on other tensors (lab.matmul's plans,
lab/plan.py) encodes its maps again for the new addresses; a map is kept per address, so replays
on the same tensors (the timing loop, a CUDA graph's capture) encode nothing.

What a map needs (cuTensorMapEncodeTiled's rules, checked by the launchers before they get here,
docs/stages/tma_wgmma.md): a global address and every stride but the first (which is 1 element)
on 16-byte boundaries; for the 128-byte swizzle a box whose first dimension is at most 128 bytes;
every box dimension at most 256 elements.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from lab.base.errors import LabError

SWIZZLE_BYTES = 128  # the swizzle every map here uses (CU_TENSOR_MAP_SWIZZLE_128B)
ALIGN = 16  # bytes: the global address and strides of a map


@dataclass(frozen=True)
class MapSpec:
    """A 2-D tensor map over kernel argument `arg` (a torch tensor): dims (inner, outer) in
    elements, the outer dimension's stride in elements, the box (inner, outer) in elements."""

    arg: int
    dims: tuple[int, int]
    stride: int
    box: tuple[int, int]


def _driver():
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    if err != driver.CUresult.CUDA_SUCCESS:  # pragma: no cover - no driver means no GPU
        raise LabError(f"the CUDA driver did not start ({err.name}); TMA stages need an sm_90 GPU")
    return driver



_CUPY_DRIVER = []


def _cupy_driver():
    """CuPy's binding of the driver's launch (cupy_backends.cuda.api.driver), imported once."""
    if not _CUPY_DRIVER:
        from cupy_backends.cuda.api import driver

        _CUPY_DRIVER.append(driver)
    return _CUPY_DRIVER[0]


def encode(tensor, spec: MapSpec):
    """The CUtensorMap of `spec` over `tensor`'s memory (its data pointer is element (0, 0))."""
    driver = _driver()
    import torch

    # 1-byte elements (fp8's float8 e4m3) as UINT8: TMA only moves the bytes, wgmma reads them as
    # e4m3
    names = {torch.bfloat16: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
             torch.float16: "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
             torch.float32: "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
             torch.float8_e4m3fn: "CU_TENSOR_MAP_DATA_TYPE_UINT8",
             torch.uint8: "CU_TENSOR_MAP_DATA_TYPE_UINT8"}
    es = tensor.element_size()
    dtype = getattr(driver.CUtensorMapDataType, names[tensor.dtype])
    ptr = tensor.data_ptr()
    if ptr % ALIGN or (spec.stride * es) % ALIGN or spec.box[0] * es > SWIZZLE_BYTES:
        raise LabError(f"a TMA tensor map needs 16-byte aligned lines and a box of at most "
                       f"{SWIZZLE_BYTES} bytes per line; got address {ptr:#x}, a stride of "
                       f"{spec.stride * es} bytes and a box of {spec.box[0] * es} bytes")
    err, tmap = driver.cuTensorMapEncodeTiled(
        dtype, 2, ptr,
        [driver.cuuint64_t(d) for d in spec.dims],
        [driver.cuuint64_t(spec.stride * es)],
        [driver.cuuint32_t(b) for b in spec.box],
        [driver.cuuint32_t(1), driver.cuuint32_t(1)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != driver.CUresult.CUDA_SUCCESS:
        raise LabError(f"the driver refused a TMA tensor map ({err.name}) for dims {spec.dims}, "
                       f"stride {spec.stride}, box {spec.box} of {tensor.dtype}")
    return tmap


class TmaLaunch:
    """One launch of an NVRTC build whose parameters include TMA tensor maps: `launch()` runs it
    with the arguments it was made with, `launch.run(*args)` with others of the same kinds (the
    plan cache's replay). Argument i that a MapSpec names is passed as that map; other tensors by
    their data pointer; numpy scalars by value (np.int32, np.int64).

    The kernel's parameter array (one address per argument, what cuLaunchKernel reads) and the
    cells it points at are made once; a call only writes the new tensors' pointers and maps into
    them and launches (the driver copies the parameters before cuLaunchKernel returns, so the
    next call may overwrite them; a lock keeps two threads from filling them at once)."""

    __slots__ = ("fn", "grid", "block", "smem", "args", "specs", "cluster", "_maps", "_kinds",
                 "_config", "_params", "_cells", "_packed", "_lock", "_map_at", "_ptr_at",
                 "_value_at")

    def __init__(self, fn, grid, block, smem: int, args: tuple, specs: tuple[MapSpec, ...],
                 cluster: int = 1):
        import threading

        import numpy as np
        import torch

        self.fn, self.grid, self.block, self.smem, self.args = fn, grid, block, smem, args
        self.cluster, self._config = cluster, None
        self.specs = {s.arg: s for s in specs}
        self._maps: dict[tuple[int, int], object] = {}  # (arg, address) -> CUtensorMap
        kinds = []
        for i, x in enumerate(args):
            if i in self.specs:
                kinds.append("map")
            elif isinstance(x, torch.Tensor):
                kinds.append("ptr")
            elif isinstance(x, np.generic):
                kinds.append({4: ctypes.c_int32, 8: ctypes.c_int64}[x.itemsize])
            else:
                raise TypeError(f"kernel argument {x!r} must be a tensor or a numpy scalar")
        self._kinds = tuple(kinds)
        # argument i's cell: a pointer's 8 bytes or a scalar's value (a map lives in its own
        # CUtensorMap, whose address goes into the array per call)
        self._cells = [None if k == "map" else ctypes.c_uint64(0) if k == "ptr" else k(int(x))
                       for k, x in zip(kinds, args)]
        self._params = (ctypes.c_void_p * len(args))(
            *(0 if c is None else ctypes.addressof(c) for c in self._cells))
        self._packed = list(args)  # the scalar object each value cell holds
        self._map_at = tuple(i for i, k in enumerate(kinds) if k == "map")
        self._ptr_at = tuple(i for i, k in enumerate(kinds) if k == "ptr")
        self._value_at = tuple(i for i, k in enumerate(kinds) if k not in ("map", "ptr"))
        self._lock = threading.Lock()

    def _map(self, i: int, tensor):
        key = (i, tensor.data_ptr())
        tmap = self._maps.get(key)
        if tmap is None:
            if len(self._maps) > 64:  # a long-lived plan replayed on many tensors
                self._maps.clear()
            tmap = self._maps[key] = encode(tensor, self.specs[i])
        return tmap

    def run(self, *args) -> None:
        from lab.toolchain.nvrtc import current_stream_ptr

        stream = current_stream_ptr()
        params, cells = self._params, self._cells
        with self._lock:
            maps = [self._map(i, args[i]) for i in self._map_at]  # referenced until launched
            for i, tmap in zip(self._map_at, maps):
                params[i] = int(tmap.getPtr())
            for i in self._ptr_at:
                cells[i].value = args[i].data_ptr()
            for i in self._value_at:
                x = args[i]
                if x is not self._packed[i]:
                    cells[i].value = int(x)
                    self._packed[i] = x
            if self.cluster > 1:
                self._launch_cluster(ctypes.addressof(params), stream)
                return
            _cupy_driver().launchKernel(self.fn.ptr, *self.grid, *self.block, self.smem, stream,
                                        ctypes.addressof(params), 0)

    def _launch_cluster(self, params: int, stream: int) -> None:
        """cuLaunchKernelEx with a cluster of `cluster` blocks along x (CuPy's launch cannot set
        one)."""
        cd = _driver()
        if self._config is None:
            cfg = _cluster_config(cd, self.grid, self.block, self.smem, self.cluster)
            self._config = (cfg, cd.CUfunction(self.fn.ptr))
        cfg, fn = self._config
        cfg.hStream = cd.CUstream(stream)
        (err,) = cd.cuLaunchKernelEx(cfg, fn, params, 0)
        if err != cd.CUresult.CUDA_SUCCESS:
            raise LabError(f"the driver refused a launch of {self.grid[0]} blocks in clusters of "
                           f"{self.cluster} ({err.name})")

    def __call__(self) -> None:
        self.run(*self.args)

    @property
    def step(self) -> tuple:
        """(run, args): what lab.base.contract.Prepared.steps holds for this launch."""
        return (self.run, self.args)


def _cluster_config(cd, grid, block, smem: int, cluster: int):
    """A CUlaunchConfig of `grid` blocks of `block` threads in clusters of `cluster` along x."""
    cfg = cd.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
    cfg.sharedMemBytes = smem
    attr = cd.CUlaunchAttribute()
    attr.id = cd.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster, 1, 1
    cfg.attrs = [attr]
    cfg.numAttrs = 1
    return cfg


def _allow_smem(fn, smem_dynamic: int) -> None:
    if smem_dynamic > 48 * 1024:
        from cupy_backends.cuda.api import driver

        driver.funcSetAttribute(
            fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem_dynamic
        )


def max_active_clusters(build, block, smem_dynamic: int, cluster: int) -> int:
    """How many clusters of `cluster` blocks of `build` the GPU holds at once
    (cuOccupancyMaxActiveClusters): a persistent grid launches no more, or the blocks beyond
    them would start only when the first finish. Not every SM can be paired: an H100's GPCs hold
    their SMs in clusters only within a GPC."""
    from lab.toolchain.nvrtc import _load

    cd = _driver()
    _, fn = _load(build)
    _allow_smem(fn, smem_dynamic)
    block = tuple(int(b) for b in block) + (1,) * (3 - len(tuple(block)))
    cfg = _cluster_config(cd, (cluster, 1, 1), block, smem_dynamic, cluster)
    err, n = cd.cuOccupancyMaxActiveClusters(cd.CUfunction(fn.ptr), cfg)
    if err != cd.CUresult.CUDA_SUCCESS or n < 1:
        raise LabError(f"{build.kernel} cannot run in clusters of {cluster} blocks of "
                       f"{block[0]} threads and {smem_dynamic} bytes of shared memory on this GPU "
                       f"({err.name}); use CLUSTER=1")
    return int(n)


def tma_launcher(build, grid, block, args, smem_dynamic: int, specs, cluster: int = 1) -> TmaLaunch:
    """A TmaLaunch of `build` (lab/toolchain/nvrtc.py's Build): the module loaded, the dynamic
    shared memory allowed, the grid checked against CUDA's limits (one sentence); `cluster` > 1
    launches clusters of that many blocks along x."""
    from lab.toolchain.nvrtc import _load, check_grid

    check_grid(grid, build.kernel)
    _, fn = _load(build)
    _allow_smem(fn, smem_dynamic)
    grid = tuple(int(g) for g in grid) + (1,) * (3 - len(tuple(grid)))
    block = tuple(int(b) for b in block) + (1,) * (3 - len(tuple(block)))
    return TmaLaunch(fn, grid, block, int(smem_dynamic), tuple(args), tuple(specs), cluster)
