// common.cuh: what every CUDA stage shares.
//
// Every stage computes C = A @ B for fp32 A (M x K), B (K x N), C (M x N), any M, N, K >= 1, with
// the BLAS argument list (A, B, C, M, N, K, lda, ldb, ldc) and a layout per operand:
//   TRANS_A = 0: A is row-major,    A(i, k) = A[i * lda + k]   (BLAS 'n', lda >= K)
//   TRANS_A = 1: A is column-major, A(i, k) = A[k * lda + i]   (BLAS 't': a transposed view)
//   TRANS_B likewise for B(k, j); C is always row-major, C(i, j) = C[i * ldc + j].
// The layouts are compile-time defines, so the nn kernel is the kernel it always was and each
// layout is its own cached build; the leading dimensions are run-time arguments (views with a
// row stride larger than their width need no copy). The shared operand check (lab/operands.py)
// turns a column-major C into the transposed problem (C^T = B^T A^T) and refuses operands whose
// furthest element, plus a 256-row/column margin, is 2^31 elements or more from their first, so
// 32-bit index arithmetic is safe here (and cheaper than 64-bit: one IMAD instead of two).
#pragma once

#ifndef TRANS_A
#define TRANS_A 0
#endif
#ifndef TRANS_B
#define TRANS_B 0
#endif
// Offsets of element (i, k) of A and (k, j) of B in their layouts.
#define A_OFF(i, k) (TRANS_A ? (k) * lda + (i) : (i) * lda + (k))
#define B_OFF(k, j) (TRANS_B ? (j) * ldb + (k) : (k) * ldb + (j))

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// UNROLL=1 (the default) lets the compiler unroll the inner product loop; UNROLL=0 forbids it,
// so a learner can see what unrolling buys.
#ifndef UNROLL
#define UNROLL 1
#endif
#define LAB_STR(x) #x
#define LAB_PRAGMA(x) _Pragma(LAB_STR(x))
#if UNROLL
#define INNER_UNROLL LAB_PRAGMA(unroll)
#else
#define INNER_UNROLL LAB_PRAGMA(unroll 1)
#endif

// Block rasterization. The launch is a 1-D grid of grid_m * grid_n blocks; block `bid` is mapped
// to the tile (bm, bn) of C. GROUP = 1 is plain row-major order: consecutive blocks walk the tiles
// of one block-row of C, so the blocks resident at one time share a few rows of A but stream
// all of B, which (64 MiB at 4096^2) does not fit the 50 MB L2. GROUP = g walks g block-rows
// column by column, so resident blocks share g block-rows of A and a few block-columns of B:
// the same work with far fewer trips to DRAM (Triton's GROUP_M ordering).
#ifndef GROUP
#define GROUP 1
#endif
__device__ __forceinline__ void block_tile(int grid_m, int grid_n, int& bm, int& bn) {
    const int bid = blockIdx.x;
    if (GROUP == 1) {
        bm = bid / grid_n;
        bn = bid - bm * grid_n;
        return;
    }
    const int width = GROUP * grid_n;       // blocks in one group of GROUP block-rows
    const int first_m = (bid / width) * GROUP;
    const int rows = min(grid_m - first_m, GROUP);
    const int in_group = bid - (bid / width) * width;
    bm = first_m + in_group % rows;
    bn = in_group / rows;
}
