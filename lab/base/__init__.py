"""The shared base: everything a kernel launcher (cuda_kernels/, triton_kernels/) may import from
the lab, kept apart from the harness. Launchers import these modules and lab.toolchain (the build
and launch tools, which import only this package), nothing else of lab/; tests/test_imports.py
holds the rule.

    errors       LabError (user mistakes, one sentence) and CompileError
    contract     the launcher contract: Offer (what a launcher declares), Tuning, Prepared (what
                 prepare() returns), PRECISIONS
    entry        entry(OFFER): the decorator on every prepare(), the one road into a launcher
    problem      Operand and Problem: the one description of a problem launchers read
    needs        Needs, and the CUDA / TRITON markers: what a backend's kernels take
    describe     describe(): a problem fitted to the stage's Needs (C^T = B^T A^T, copies)
    checks       check_operands, scales_for: the one check of every call's operands
    dtypes       precision <-> dtype names, precision_for (which precision a call computes in)
    index_range  the 32-bit limits, when a problem needs 64-bit offsets (Problem.offsets64)
    padding      Padded: zero padding to tile multiples, and the timed crop
    timer        timer(): one-time work in prepare() timed into setup_ms
    device       sm_count(device), DEFAULT_SMS: the GPU's size as the launchers size tiles by it
    splitk       split-K arithmetic (the automatic split), shared with the tuner's seeds

The precision records (lab/base/precisions.py) belong to the base too. The base imports nothing of
the harness (run, compare, check, table, csvfile, stages, tune, ...): dependencies point one way,
commands -> harness -> registry -> launchers -> lab.toolchain -> lab.base. Each name has one home
here; this package's __init__ re-exports nothing, so a launcher's import line says which module a
name comes from.
"""
