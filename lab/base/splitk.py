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
3. **tiles x S nearest TARGET = 8 x sms blocks**, in ratio (|log(tiles*S / target)|, a tie to the
   smaller S), among the SPLITS that step 2 allows. One wave is not enough: a block alone is
   latency-bound, and blocks beyond the first keep the SMs issuing and make the last wave's tail
   a smaller part of the whole; the 64 x 64 CUDA tile of step 5 fits 8 blocks per SM (64
   registers x 128 threads). Measured on an H100 at 320x192x786432 in 64 x 64 tiles (15 tiles;
   results/2026-11-25-h100/splitk-sweep.csv): splitk 16, 32, 48, 64 (240 to 960 blocks) ran at
   40.3, 67.9, 78.8 and 83.5% of cuBLAS fp32 in CUDA, and the Triton twin (4 warps) at 97.4% at
   32 and 98.6% at 64: more blocks kept paying up to the largest choice. (The tuner's seeds aim
   at 1x, 2x and 4x: TARGETS.)
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

5. **The tile.** Where a split is taken, the launcher also compares the given block tile with
   SMALL_TILE x SMALL_TILE (64 x 64) and takes the one that computes fewer padded elements of C,
   the given one on a tie (auto_tile_and_split). 320x192 in 128 x 128 tiles is 3 x 2 tiles that
   compute 384 x 256 elements, 62.5% of them C's: the same split there ran at 29.1% (CUDA) and
   65.6% (Triton) of cuBLAS against 83.5% and 98.6% in 64 x 64 tiles (results/2026-11-25-h100/
   splitk-default-128.csv, splitk-sweep.csv). 256x256 is whole 128 x 128 tiles: it keeps them
   (74.8% CUDA at splitk 64, against 66.4% in 64 x 64). The CUDA stage's 64 x 64 tile is four 32
   x 32 warp tiles (WM = WN = 32, WNITER = 1); the Triton twin's runs 4 warps. An explicit
   splitk keeps every parameter as given.

**Workspace**: S*M*N*4 bytes (the CUDA kernel rounds N up to a multiple of 4). Near the target,
tiles x S is about 4 x sms blocks of BM x BN: 528 x 64 KiB = 35 MB at 128 x 128 on an H100. Step 4
can raise it on very long K, but never past S*M*N <= M*N*K/1024 floats (step 2), i.e.
min(M, N)/1024 times the operands' own size (with tiles < sms, min(M, N) < 1,500 at 128 x 128).

**What it gives** (H100, 132 SMs, the default 128 x 128 tiles of both backends given, so the CUDA
and Triton rows choose alike):

| shape | tile | tiles | S | blocks | K/S (chain) | workspace | why |
|---|---|---:|---:|---:|---:|---:|---|
| 320x192x786432 | 64 x 64 | 15 | 64 | 960 | 12288 | 15.7 MB | 64 x 64 pads no edge; target 1056 |
| 256x256x524288 | 128 x 128 | 4 | 64 | 256 | 8192 | 16.8 MB | the largest choice; error ~1.6e-6 |
| 4096^3 | 128 x 128 | 1024 | 1 | 1024 | 4096 | - | tiles >= SMs |
| 1025^3 | 128 x 128 | 81 | 1 | 81 | 1025 | - | K/2 < 1024 |
| 128^3 | 128 x 128 | 1 | 1 | 1 | 128 | - | K/2 < 1024 |
| 1024x1024x65536 | 128 x 128 | 64 | 16 | 1024 | 4096 | 67.1 MB | target 1056 |

The reduction's traffic at 320x192x786432: 2 x 15.7 MB, about 10 us at 3 TB/s, beside cuBLAS's
2.4 ms for the whole product.
"""

from __future__ import annotations

import math
from typing import Iterable

from lab.base.device import DEFAULT_SMS

AUTO = 0  # splitk=0: the split auto_split() chooses from the shape (the registry's default)
SPLITS = (1, 2, 3, 4, 6, 8, 16, 32, 48, 64)  # the splits the registry offers beside AUTO
TARGETS = (1, 2, 4)  # the tuner's seeds aim tiles x split at these multiples of the SM count
TARGET = 8  # the automatic split aims tiles x split at this multiple of the SM count (step 3)
MIN_SPLIT_K = 1024  # the automatic split keeps every split at least this much of K (step 2)
MAX_CHAIN = 16384  # ... and raises S until no split sums more than this many products (step 4)
SMALL_TILE = 64  # the block tile edge a split takes where it wastes less of C's edge (step 5)


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


def padded_area(M: int, N: int, BM: int, BN: int) -> int:
    """Elements of C that BM x BN tiles compute, the edge tiles' padding included."""
    return cdiv(M, BM) * BM * cdiv(N, BN) * BN


def auto_tile_and_split(M: int, N: int, K: int, BM: int, BN: int, sms: int | None = None,
                        choices: Iterable[int] = SPLITS) -> tuple[int, int, int]:
    """(BM, BN, S) that `splitk=0` runs: the given tile and auto_split()'s S; but where a split is
    taken and the SMALL_TILE x SMALL_TILE tile wastes less of C's edge than the given one (step 5
    of this module's docstring), that tile and its own automatic split."""
    s = auto_split(M, N, K, BM, BN, sms, choices)
    if s == 1 or (BM, BN) == (SMALL_TILE, SMALL_TILE):
        return BM, BN, s
    if padded_area(M, N, SMALL_TILE, SMALL_TILE) < padded_area(M, N, BM, BN):
        small = auto_split(M, N, K, SMALL_TILE, SMALL_TILE, sms, choices)
        if small > 1:
            return SMALL_TILE, SMALL_TILE, small
    return BM, BN, s


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
