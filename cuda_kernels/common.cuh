// common.cuh: what every CUDA stage shares.
//
// Every stage computes C = A @ B for row-major fp32 A (M x K), B (K x N), C (M x N), any M, N, K >= 1.
// The harness rejects matrices of 2^31 elements or more, so 32-bit index arithmetic is safe here
// (and cheaper than 64-bit: one IMAD instead of two per address).
#pragma once

#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// UNROLL=1 (the default) lets the compiler unroll the inner product loop; UNROLL=0 forbids it,
// so a learner can see what unrolling buys (issue: compiler switches).
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
