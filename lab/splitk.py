"""Split-K arithmetic, in one place: how many output tiles a shape has, which splits of K are
allowed, which split brings tiles x split nearest a number of blocks, and the automatic split.

Used by the launchers that split K (cuda_kernels/warptiling.py and its Triton twin
triton_kernels/warptiling.py, whose `splitk=0`, the registry's default, is auto_split()) and by the
tuner's split-K seeds (lab/tune/seeds.py: nearest_split() aimed at 1x, 2x and 4x the SM count).
It knows tiles, SMs and K, nothing of a kernel; the choices of S are the registry's (SPLITS).

## The automatic split (`splitk=0`)

For an M x N x K product in BM x BN block tiles on a GPU of `sms` SMs (the device's
multiprocessor count; 132, an H100 SXM's, where there is no GPU):

1. **Only with fewer tiles than SMs.** tiles = ceil(M/BM) * ceil(N/BN). With tiles >= sms every
   SM already has a block and a split only adds the workspace traffic and a second kernel: S = 1.
   4096^3 in 128 x 128 tiles is 1024 tiles, 7.8 per SM: S = 1.
2. **Every split keeps K/S >= MIN_SPLIT_K = 1024** (64 k-steps of the CUDA kernel's BK = 16, 32 of
   the Triton twin's BLOCK_K = 32: the loop's prologue and epilogue stay a small part of it). The
   price of a split is the workspace: the main kernel writes S slabs of M x N floats instead of
   C, and the reduction reads them back, about 8*S*M*N bytes more than the unsplit kernel moves,
   against its 2*M*N*K FLOP. At an H100's FP32 peak (66.9 TFLOP/s) and its copy bandwidth
   (3.0 TB/s):

       extra / main = (8*S*M*N / 3.0e12 B/s) / (2*M*N*K / 66.9e12 FLOP/s) = 89.2 * S / K

   8.7% of the main kernel's time at K/S = 1024 (35% at 256, 1.1% at 8192), and that against the
   kernel at its peak: a split only happens where the unsplit kernel keeps at most tiles/sms of
   the SMs busy, so the time it saves is far larger. 1025^3 (81 tiles < 132) has K = 1025, too
   short for two splits of 1024: S = 1; so are 1024^3 and 128^3.
3. **tiles x S nearest TARGET = 4 x sms blocks**, in ratio (|log(tiles*S / target)|, a tie to the
   smaller S), among the SPLITS that step 2 allows: the largest of the seeds' targets. One wave
   is not enough: the default CUDA tile fits 2 blocks per SM (221 registers x 128 threads) and
   the Triton one 1 (8 warps of 190 registers), and a block alone is latency-bound, so blocks
   beyond the first wave keep the SMs issuing and make the last wave's tail a smaller part of
   the whole. Measured on an H100 at 320x192x786432 (results/2026-11-22-h100/
   30-tune-warptiling-cuda-splitk.log, CUDA, 128 x 64 tiles = 9 tiles): splitk 16, 32, 64 (144,
   288, 576 blocks) took 15.8, 9.0 and 6.5 ms: more blocks kept paying up to the largest choice.
4. **Accuracy: the fp32 chain K/S <= MAX_CHAIN = 16384.** A kernel sums each element's K/S
   products of a split in one fp32 chain, one rounding per step; with random signs the
   relative error grows like sqrt(chain) (docs/CHECKING.md), about 1.8e-8 * sqrt(chain) on an
   H100: at 320x192x786432 (results/2026-11-22-h100/25-splitk.csv) splitk 2, 3, 16, 32 (chains
   393216, 262144, 49152, 24576) gave 1.12e-5, 9.1e-6, 4.0e-6, 2.8e-6, each within 1% of
   1.12e-5 * sqrt(2/S). At 256x256x524288 the unsplit chain gave 1.3e-5 where cuBLAS fp32 gave
   1.6e-6 on the same inputs, what a chain of about 524288 * (1.6/13)^2 = 7,900 gives. A chain
   of 16384 gives about 2.3e-6, 1.4x that; the reduction's own S - 1 additions add about
   u*sqrt(S/2) relative (1.4e-7 at S = 64 with the same constant). Where step 3 chose a smaller
   S, S rises to the smallest choice with K/S <= MAX_CHAIN (never beyond step 2's limit or the
   largest choice). At 256x256x524288 step 3 already gives 64: chains of 8192, about 1.6e-6.

**Workspace**: S*M*N*4 bytes (the CUDA kernel rounds N up to a multiple of 4). Near the target,
tiles x S is about 4 x sms blocks of BM x BN: 528 x 64 KiB = 35 MB at 128 x 128 on an H100. Step 4
can raise it on very long K, but never past S*M*N <= M*N*K/1024 floats (step 2), i.e.
min(M, N)/1024 times the operands' own size (with tiles < sms, min(M, N) < 1,500 at 128 x 128).

**What it gives** (H100, 132 SMs, the default 128 x 128 tiles of both backends, so the CUDA and
Triton rows split alike):

| shape | tiles | S | blocks | K/S (chain) | workspace | why |
|---|---:|---:|---:|---:|---:|---|
| 320x192x786432 | 6 | 64 | 384 | 12288 | 15.7 MB | target 528: 64 (48 gives 288) |
| 256x256x524288 | 4 | 64 | 256 | 8192 | 16.8 MB | target 528: the largest choice; error ~1.6e-6 |
| 4096^3 | 1024 | 1 | 1024 | 4096 | - | tiles >= SMs |
| 1025^3 | 81 | 1 | 81 | 1025 | - | K/2 < 1024 |
| 128^3 | 1 | 1 | 1 | 128 | - | K/2 < 1024 |
| 1024x1024x65536 | 64 | 8 | 512 | 8192 | 33.6 MB | target 528 |

The reduction's traffic at 320x192x786432: 2 x 15.7 MB, about 10 us at 3 TB/s, beside cuBLAS's
2.4 ms for the whole product.
"""

from __future__ import annotations

import math
from typing import Iterable

from lab.roofline import DEFAULT_SMS

AUTO = 0  # splitk=0: the split auto_split() chooses from the shape (the registry's default)
SPLITS = (1, 2, 3, 4, 6, 8, 16, 32, 48, 64)  # the splits the registry offers beside AUTO
TARGETS = (1, 2, 4)  # the tuner's seeds aim tiles x split at these multiples of the SM count
TARGET = TARGETS[-1]  # the automatic split aims at the largest (step 3)
MIN_SPLIT_K = 1024  # the automatic split keeps every split at least this much of K (step 2)
MAX_CHAIN = 16384  # ... and raises S until no split sums more than this many products (step 4)


def cdiv(a: int, b: int) -> int:
    return -(-int(a) // int(b))


def tile_count(M: int, N: int, BM: int, BN: int) -> int:
    """Output tiles of an M x N product in BM x BN block tiles."""
    return cdiv(M, BM) * cdiv(N, BN)


def few_tiles(tiles: int, sms: int) -> bool:
    """Whether `tiles` blocks leave SMs of a `sms`-SM GPU idle: the only case worth a split."""
    return tiles < sms


def allowed_splits(choices: Iterable[int], K: int, min_depth: int) -> list[int]:
    """The splits among `choices` (AUTO and other values below 1 left out) that leave every split
    at least `min_depth` of K; 1 is always allowed when it is a choice."""
    return [s for s in choices if s >= 1 and (s == 1 or K // s >= min_depth)]


def nearest_split(tiles: int, target: float, splits: Iterable[int]) -> int:
    """The split S among `splits` whose tiles x S lies nearest `target` blocks in ratio (a tie
    goes to the smaller S)."""
    return min(splits, key=lambda s: (abs(math.log(tiles * s / target)), s))


def auto_split(M: int, N: int, K: int, BM: int, BN: int, sms: int | None = None,
               choices: Iterable[int] = SPLITS) -> int:
    """The split `splitk=0` runs for an M x N x K product in BM x BN tiles on a GPU of `sms` SMs
    (DEFAULT_SMS, 132, when None): steps 1 to 4 of this module's docstring."""
    sms = int(sms or DEFAULT_SMS)
    tiles = tile_count(M, N, BM, BN)
    splits = allowed_splits(choices, K, MIN_SPLIT_K)
    if not few_tiles(tiles, sms) or not any(s > 1 for s in splits):
        return 1
    s = nearest_split(tiles, TARGET * sms, splits)
    if K / s > MAX_CHAIN:  # step 4: a shorter fp32 chain per split
        s = min((c for c in splits if K / c <= MAX_CHAIN), default=max(splits))
    return s
