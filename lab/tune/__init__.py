"""The autotuner behind `python -m lab.autotune` (lab/autotune.py is the command; docs/AUTOTUNE.md
has the whole story). One module per concern, each importing only those above it:

    space.py    the space: Space, space_of, restrictions, numerics pins, neighbours, text helpers
    seeds.py    split-K seeds for shapes with few output tiles
    prune.py    what is asked before a launch: validate(), the build identity, the resource check
    search.py   the search itself (order, evaluation, refinement): Trial, Result, candidates()
    pool.py     CUDA builds on a thread pool: cuda_probe, CompileAhead, compile_sample
    cache.py    the tuning cache: buckets, keys, load/store, the cache record
    gpu.py      the GPU side: GpuBench (inputs, reference, real launch, check and timer)
    tuner.py    tune(): one search on the GPU, or the cache's answer
    auto.py     `stage:auto` rows: lookup, resolve, resolve_variant
    report.py   text output: progress, the per-search report, dry-run lines
    dryrun.py   --dry-run and --compile-all (no GPU)
    workers.py  a search over several GPUs: ranks of torch.distributed evaluate the candidates
                (--gpus N, torchrun), the finalists are timed on one
    cli.py      argparse and main()

The search:

1. The space is the Cartesian product of the `choices` of every Param the registry
   (lab/stages.py) declares for the backend, minus the Params marked `numerics=True` (switches
   that change the results' numerics): each is pinned at its registry default, so a tuned row is
   checked and compared like any other row of its precision. A product larger than
   ENUMERATE_LIMIT is sampled (a fixed random generator, the defaults always in).
   `--stage stage:name=v1|v2,name=v` restricts parameters to some of their registry choices (one
   value pins it); the defaults become the registry's with each restricted parameter at its
   default if allowed, else at its first given value (then the nearest configuration validate()
   accepts, changing as few parameters as possible).
2. Validate-prune: the launcher's `OFFER.validate(params, precision)` (lab/base/contract.py) rejects
   what cannot compile or launch (a LabError = pruned, never tried).
3. The candidates are tried in this order: the defaults first; then the split-K seeds (below);
   then, two picks out of three, the untried one-parameter neighbours of the best configuration so
   far (nearest choices first), and every third pick (or when the best has no untried neighbour
   left) the next configuration of a fixed shuffled order of the rest. The order depends on
   nothing but the timings, so the same timings give the same search.
   Split-K seeds (seeds.splitk_seeds), only for a space that searches the parameter the offer
   names as its split (`OFFER.tuning.split`): when the defaults' block tile (the two parameters
   of `OFFER.tuning.tile`, or the pair `OFFER.tuning.tile_of(defaults)` gives, for which the
   seeds set the split alone) gives fewer output tiles than the GPU has SMs (the device's count,
   else SEED_SMS) and K >= 2 * SEED_MIN_SPLIT_K, then for the defaults' tile and up to
   SEED_TILES - 1 smaller ones (both edges one choice down each time), the split choices whose
   tiles x split lie nearest (in ratio) to 1x, 2x and 4x the SM count, among those that leave
   every split at least SEED_MIN_SPLIT_K of K; the other parameters are the defaults'. A seed
   validate() refuses is replaced by the nearest configuration it accepts with the same tile and
   split (fewest parameters changed), if any. A long-K shape with few tiles is where the sampled
   order rarely reaches a good split. A launcher that names `OFFER.tuning.streamk` (persistent's
   STREAMK) also gets the defaults with it at 1 as a seed where the defaults' tiles are more than
   the SMs and not a multiple of them.
   Configurations that `OFFER.resolve()` turns into the same build for this shape (automatic
   values made concrete) are one candidate, tried once.
4. Resource-prune, per candidate: a CUDA candidate is compiled (`OFFER.compile`, NVRTC, cheap) and
   dropped if ptxas reports spills or its block does not fit an SM (threads, registers, shared
   memory: lab.occupancy with this GPU's limits); a Triton candidate is dropped after its compile
   if it spills (the `resources` of the Prepared launch).
   Compile ahead (CUDA, --jobs N > 1): while a candidate is checked and timed, a pool of N threads
   compiles the next 2N candidates the search would pick if the best stayed the best (NVRTC is
   thread-safe for distinct programs); when the best changes, the queued builds no longer in that
   plan are dropped. The probe of a candidate waits for its build in flight instead of compiling
   it twice. Compiling ahead changes what is compiled when, never the order or the result.
5. Correct before timed: the output is poisoned with NaN, the kernel runs once and is compared with
   the float64 reference (lab.check); a wrong configuration is discarded and listed.
6. Short timing (lab.timing.bench with SHORT_REP_MS of repetitions). The search stops taking new
   candidates when EXPLORE_FRACTION of --budget-s is spent, when --max-configs candidates have been
   launched, or on Ctrl-C.
7. Refinement: the TOP fastest and the defaults are timed again with LONG_REP_MS, REFINE_ROUNDS
   times in turn; the lowest of a configuration's medians is its time, and the fastest wins (a tie
   goes to the one found first).

The dry run (--dry-run, no GPU) describes steps 1 to 4 in seconds: the space, the validate prune
(search.candidates()), and the resource prune estimated from NVRTC builds of a bounded sample
(pool.compile_sample(): the defaults, the split-K seeds and DRY_RUN_SAMPLE configurations picked
at random, no new build after DRY_RUN_COMPILE_S); --compile-all builds the whole valid space.

Nothing here imports torch or a kernel until it is needed; every piece that touches the GPU is a
plain function handed to `search` (launch factory, checker, timer, resource probe), so the tests
drive the whole search on the CPU with fakes.
"""
