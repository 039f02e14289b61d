"""The TMA launch's parameter array (lab/toolchain/tma.py TmaLaunch), on the CPU.

A TmaLaunch makes its kernel-parameter array once and rewrites only the pointers, maps and changed
scalars in it per call. These tests read back what cuLaunchKernel would read (the array of
addresses and the bytes each points at), with the driver's launch, the stream and the map encoder
replaced, for the first call, for replays on other tensors and scalars, for a launch in clusters
and for two threads calling one launch at once.
"""

from __future__ import annotations

import ctypes
import threading
import time
import types

import numpy as np
import pytest
import torch

from lab.toolchain import nvrtc, tma

MAP_BYTES = 128  # a CUtensorMap


class FakeMap:
    """A stand-in CUtensorMap: 128 bytes that name the argument and the address it was made for."""

    def __init__(self, tensor, spec):
        self.buf = ctypes.create_string_buffer(MAP_BYTES)
        self.buf.raw = (f"map {spec.arg} @ {tensor.data_ptr():#x}".encode()
                        .ljust(MAP_BYTES, b"\0"))

    def getPtr(self):
        return ctypes.addressof(self.buf)


def _decode(params: int, kinds, n: int) -> list:
    """What the kernel gets: argument i's value read through the parameter array at `params`."""
    addrs = (ctypes.c_void_p * n).from_address(params)
    out = []
    for kind, addr in zip(kinds, addrs):
        if kind == "map":
            out.append(ctypes.string_at(addr, MAP_BYTES))
        elif kind == "ptr":
            out.append(ctypes.c_uint64.from_address(addr).value)
        else:
            out.append(kind.from_address(addr).value)
    return out


def _expected(args, specs) -> list:
    out = []
    for i, x in enumerate(args):
        if i in specs:
            out.append(FakeMap(x, specs[i]).buf.raw)
        elif isinstance(x, torch.Tensor):
            out.append(x.data_ptr())
        else:
            out.append(int(x))
    return out


@pytest.fixture
def launches(monkeypatch):
    """[(function pointer, grid, block, smem, stream, decoded arguments)] of every launch."""
    seen = []
    state = {}

    def launch_kernel(fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        launch = state["launch"]
        time.sleep(state.get("sleep", 0))  # the GIL released, as the driver's call does
        seen.append((fn, (gx, gy, gz), (bx, by, bz), smem, stream,
                     _decode(params, launch._kinds, len(launch.args)), threading.get_ident()))

    monkeypatch.setattr(tma, "encode", FakeMap)
    monkeypatch.setattr(tma, "_cupy_driver", lambda: types.SimpleNamespace(
        launchKernel=launch_kernel))
    monkeypatch.setattr(nvrtc, "current_stream_ptr", lambda device=None: 0x5EED)
    return seen, state


def _operands(m=64, n=96, k=128, fill=0):
    a = torch.full((m, k), fill, dtype=torch.bfloat16)
    b = torch.full((k, n), fill, dtype=torch.bfloat16)
    c = torch.full((m, n), fill, dtype=torch.bfloat16)
    work = torch.zeros(16)
    return a, b, c, work


def _launch(args, cluster=1):
    specs = (tma.MapSpec(0, (128, 64), 128, (64, 64)), tma.MapSpec(1, (96, 128), 96, (64, 32)),
             tma.MapSpec(2, (96, 64), 96, (32, 64)))
    return tma.TmaLaunch(types.SimpleNamespace(ptr=0xF00), (132, 1, 1), (384, 1, 1), 200_000,
                         args, specs, cluster=cluster), {s.arg: s for s in specs}


def _args(a, b, c, work, m=64, n=96, k=128):
    # the shape of a persistent launch's list: maps, C and a workspace by pointer, sizes
    return (a, b, c, c, work, np.int32(m), np.int32(n), np.int32(k), np.int32(-7),
            np.int64(2 ** 40 + 3))


def test_the_first_call_passes_every_argument(launches):
    seen, state = launches
    args = _args(*_operands())
    launch, specs = _launch(args)
    state["launch"] = launch
    launch()
    (fn, grid, block, smem, stream, values, _), = seen
    assert (fn, grid, block, smem, stream) == (0xF00, (132, 1, 1), (384, 1, 1), 200_000, 0x5EED)
    assert values == _expected(args, specs)
    assert values[8] == -7 and values[9] == 2 ** 40 + 3


def test_a_replay_passes_the_new_tensors_and_scalars(launches):
    seen, state = launches
    first = _operands()
    launch, specs = _launch(_args(*first))
    state["launch"] = launch
    launch()
    other = _operands(fill=1)
    again = _args(*other, m=65, n=97, k=129)
    launch.run(*again)
    launch.run(*_args(*first))  # back to the first tensors: their maps come from the cache
    assert [s[5] for s in seen] == [_expected(_args(*first), specs), _expected(again, specs),
                                    _expected(_args(*first), specs)]
    assert seen[0][5] != seen[1][5]
    assert len(launch._maps) == 6  # three maps for each set of tensors, made once


def test_a_launch_in_clusters_passes_the_same_array(launches, monkeypatch):
    seen, state = launches
    args = _args(*_operands())
    launch, specs = _launch(args, cluster=2)
    state["launch"] = launch
    got = []
    monkeypatch.setattr(tma.TmaLaunch, "_launch_cluster", lambda self, params, stream: got.append(
        (stream, _decode(params, self._kinds, len(self.args)))))
    launch()
    assert not seen and got == [(0x5EED, _expected(args, specs))]


def test_two_threads_do_not_mix_their_arguments(launches):
    seen, state = launches
    sets = [_args(*_operands(fill=f), m=64 + f) for f in range(2)]
    launch, specs = _launch(sets[0])
    state["launch"], state["sleep"] = launch, 0.002

    own = {}

    def calls(args):
        own[threading.get_ident()] = _expected(args, specs)
        for _ in range(10):
            launch.run(*args)

    threads = [threading.Thread(target=calls, args=(s,)) for s in sets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 20 and len(own) == 2
    assert all(values == own[thread] for *_, values, thread in seen)
