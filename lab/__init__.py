"""The kernel-agnostic harness of the matmul kernel lab (see docs/ARCHITECTURE.md), and the Python
API for running one stage on your own tensors:

    from lab import matmul, which, LabError
    c = matmul(a, b)                                               # the lab picks the stage (auto)
    print(which(a, b))                                             # ... and says which, and why
    c = matmul(a, b, stage="vectorized", backend="cuda")          # a new C
    matmul(a, b, stage="tiled", backend="triton", out=c, tile=16)  # into an existing C (a view too)

A and B may be row-major, transposed views (`x.t()`), views with a storage offset, or slices with
a row stride larger than their width; `out` may be such a view too. Every mistake raises LabError
with one sentence.
"""

from lab.base.errors import CompileError, LabError

__all__ = ["matmul", "which", "LabError", "CompileError"]


def matmul(a, b, stage: str | None = None, backend: str | None = None, out=None,
           precision: str | None = None, scale_a=None, scale_b=None, **params):
    """C = A @ B computed by one stage of the lab (`python -m lab.compare --list` lists them;
    None or "auto": the lab picks the stage, backend and parameters for these tensors' GPU, shape,
    precision and layout, lab/dispatch.py, docs/DISPATCH.md; `which(a, b)` says what it picks).
    backend: "cuda" or "triton"; None: CUDA for a named stage, any for auto (a backend given
    restricts auto's choice to it).

    a: M x K, b: K x N float32 tensors on one device (a CUDA GPU; Triton stages also run CPU
    tensors under the Triton interpreter, TRITON_INTERPRET=1). out: an M x N float32 tensor to
    write (any strides, not overlapping a or b), or None for a new one. precision: fp32, tf32,
    3xtf32, bf16, fp16 or fp8 where the stage supports it (lab/stages.py); None takes it from the
    dtype (float32 -> fp32, bfloat16 -> bf16, float16 -> fp16, float8_e4m3fn -> fp8; C has the
    operands' dtype, except fp8's, which is bfloat16). scale_a, scale_b: fp8's per-tensor scales
    (one-element float32 tensors on the operands' device, or numbers; None is 1): C = scale_a *
    scale_b * (A @ B).
    params: the stage's parameters (e.g. tile=16), checked against the registry. Returns C. Like torch.matmul, the
    call is asynchronous on a GPU (it returns once the kernel is queued on the current stream).
    """
    from lab import plan as plans

    scales = (scale_a, scale_b)
    if isinstance(stage, str) and ":" in stage:  # "tiled:tile=16", "warptiling:auto"
        stage, params = _stage_string(stage, backend, a, b, precision, params)
    auto = stage is None or (isinstance(stage, str) and stage.strip().lower() == "auto")
    # auto's plan is keyed by "auto": a repeated call replays what the first one chose
    key = plans.signature(a, b, out, "auto" if auto else stage, backend, precision, params,
                          scales)
    if key is not None:
        hit = plans.lookup(key)
        if hit is not None and not plans.capturing(a):
            return _replay(hit, a, b, out, scales)
    if auto:
        if params:
            raise LabError(f"stage='auto' picks the stage's parameters itself, so it takes none "
                           f"({', '.join(params)}); name a stage to set them (lab.which(a, b) "
                           f"says which stage auto picks)")
        choice = which(a, b, precision=precision, out=out, backend=backend)
        return _matmul(a, b, choice.stage, choice.backend, out, precision, dict(choice.params),
                       key, scales)
    return _matmul(a, b, stage, "cuda" if backend is None else backend, out, precision, params,
                   key, scales)


def which(a, b, precision: str | None = None, out=None, backend: str | None = None):
    """The stage, backend and parameters `matmul(a, b)` with no stage runs for these tensors, as a
    lab.dispatch.Choice (stage, backend, params, reason, source; str() reads as two lines): from
    the dispatch table measured on this GPU (lab/data/dispatch.json), else the rule by
    architecture and shape (docs/DISPATCH.md). Nothing runs. `out` is accepted as matmul takes it
    (the choice does not depend on it); `backend` restricts the choice to one backend."""
    import torch

    from lab import dispatch
    from lab.base.dtypes import precision_for
    from lab.stages import BACKENDS, PRECISIONS

    where = "the automatic choice (stage auto)"
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise LabError(f"{where}: {name} must be a torch.Tensor, not {type(t).__name__}")
        if t.dim() != 2:
            raise LabError(f"{where}: {name} must be a 2-D matrix, not {t.dim()}-D of shape "
                           f"{tuple(t.shape)}")
    if a.shape[1] != b.shape[0]:
        raise LabError(f"{where}: A is {a.shape[0]}x{a.shape[1]} and B is {b.shape[0]}x"
                       f"{b.shape[1]}, so A's columns and B's rows differ; A @ B needs A's "
                       f"columns to equal B's rows")
    if backend is not None:
        backend = str(backend).strip().lower()
        if backend not in BACKENDS:
            raise LabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    precision = precision_for(a, precision, where, PRECISIONS)
    target = dispatch.target_of(a.device)
    if target.interpreter:  # before any Triton kernel is imported to look at its Offer
        _interpreter_for_cpu_tensors(where)
    return dispatch.choose(a.shape[0], b.shape[1], a.shape[1], precision,
                           dispatch.layout_of(a, b), target, backend)


def _stage_string(text, backend, a, b, precision, params):
    """(stage name, parameters) of a stage string: `name:k=v,...` (the parameters as lab.compare
    --stage takes them, merged with the keyword ones, which may not repeat them) or `name:auto`
    (the configuration python -m lab.autotune cached for this GPU, shape, layout and precision,
    else the stage's defaults; docs/AUTOTUNE.md)."""
    import torch

    from lab.stages import parse_variants

    variants = parse_variants([text])
    if len(variants) != 1:
        raise LabError(f"stage {text!r} names {len(variants)} stages; give one, such as "
                       f"tiled:tile=16")
    (variant,) = variants
    name = variant.stage.name
    bk = "cuda" if backend is None else str(backend).strip().lower()
    if variant.auto:
        from lab.base.dtypes import precision_for
        from lab.dispatch import layout_of
        from lab.tune.auto import resolve_variant

        for what, t in (("a", a), ("b", b)):
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                raise LabError(f"stage {text}: {what} must be a 2-D torch.Tensor")
        prec = precision_for(a, precision, f"stage {text}", variant.stage.precisions_for(bk))
        variant, _ = resolve_variant(variant, bk, a.shape[0], b.shape[1], a.shape[1],
                                     layout_of(a, b), prec,
                                     mode="gpu" if a.device.type == "cuda" else "cpu")
        if params:
            raise LabError(f"stage {text} takes its parameters from the tuner's cache, so it "
                           f"takes none more ({', '.join(params)})")
    defaults = variant.stage.defaults()
    given = {k: v for k, v in variant.params.items() if v != defaults.get(k)}
    twice = sorted(set(given) & set(params))
    if twice:
        raise LabError(f"stage {text} sets {', '.join(twice)} and so do the keyword arguments; "
                       f"set each parameter once")
    own = {p.name for p in variant.stage.params if bk in p.backends}
    return name, {**{k: v for k, v in given.items() if k in own}, **params}


def _out_dtype(a):
    """The dtype of a new C: the operands' (float8 e4m3 operands: bfloat16, fp8's C)."""
    import torch

    from lab.base.dtypes import OUT_DTYPE_NAMES, PRECISION_OF_DTYPE

    p = PRECISION_OF_DTYPE.get(str(a.dtype).removeprefix("torch."))
    return getattr(torch, OUT_DTYPE_NAMES[p]) if p in OUT_DTYPE_NAMES else a.dtype


def _replay(plan, a, b, out, scales):
    """A call whose signature has a plan (lab/plan.py): only the checks that depend on the tensors
    themselves, then the plan's steps on these tensors."""
    import torch

    if out is None:
        out = torch.empty((a.shape[0], b.shape[1]), dtype=plan.out_dtype, device=a.device)
    else:
        clash = plan.overlap(a, b, out)
        if clash is not None:
            from lab.base.checks import overlap_message

            raise LabError(overlap_message(plan.where, clash))
    if a.requires_grad or b.requires_grad or out.requires_grad:
        plan(a.detach(), b.detach(), out.detach(), scales)
    else:
        plan(a, b, out, scales)
    return out


def _matmul(a, b, stage, backend, out, precision, params, key, scales=(None, None)):
    """The full road: resolve, check, prepare, launch; keep the plan when `key` is given."""
    import torch

    from lab import plan as plans
    from lab.base.checks import check_operands
    from lab.base.dtypes import DTYPE_NAMES, OUT_DTYPE_NAMES, precision_for
    from lab.base.needs import Needs
    from lab.stages import BACKENDS, DEFAULT_STAGE, Variant, get_stage

    stage = DEFAULT_STAGE if stage is None else stage

    if not isinstance(stage, str):
        raise LabError(f"stage must be a stage name such as 'tiled', not {type(stage).__name__}")
    if stage.strip().lower() == "all":
        raise LabError("matmul runs one stage, and 'all' names every stage (python -m lab.compare "
                       "--stage all runs them side by side); name one stage, or give none for "
                       "the stage the lab picks")
    spec = get_stage(stage.strip().lower())
    backend = str(backend).strip().lower()
    if backend not in BACKENDS:
        raise LabError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    declared = {p.name: p for p in spec.params if backend in p.backends}
    values = spec.defaults()
    for name, value in params.items():
        if name not in declared:
            known = ", ".join(declared) or "none"
            raise LabError(f"stage {spec.name} ({backend}) has no parameter {name!r} (its "
                           f"parameters: {known})")
        prm = declared[name]
        value = prm.coerce(value)
        if (isinstance(value, bool) is not isinstance(prm.default, bool)
                or not isinstance(value, type(prm.default)) or value not in prm.choices):
            raise LabError(f"parameter {name} of stage {spec.name} takes one of "
                           f"{', '.join(map(str, prm.choices))}, not {value!r}")
        values[name] = value
    where = f"stage {spec.name} ({backend})"
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise LabError(f"{where}: {name} must be a torch.Tensor, not {type(t).__name__}")
    out_given = out is not None
    if out is None:
        if a.dim() == 2 and b.dim() == 2:
            out = torch.empty((a.shape[0], b.shape[1]), dtype=_out_dtype(a),
                              device=a.device)
        else:  # let the shared check say what is wrong with the shapes
            out = a.new_empty((0, 0))
    if backend == "triton" and a.device.type == "cpu" and not torch.cuda.is_available():
        _interpreter_for_cpu_tensors(where)  # before the stage's kernels are imported
    precision = precision_for(a, precision, where, spec.precisions_for(backend))
    c_dtype = OUT_DTYPE_NAMES[precision]
    needs = Needs(blas=backend == "cuda", dtypes=(DTYPE_NAMES[precision],),
                  out=None if c_dtype == DTYPE_NAMES[precision] else c_dtype)
    on_cpu = a.device.type == "cpu"
    check_operands(a, b, out, where, needs, device="cuda" if backend == "cuda" else "any",
                   out_given=out_given)
    if backend == "triton" and on_cpu:
        _interpreter_for_cpu_tensors(where)
    module = spec.module(backend)
    if backend == "triton" and on_cpu:
        _refuse_compiled_kernels(where)
    kwargs = dict(precision=precision, **Variant(spec, values).params_for(backend))
    given = {k: v for k, v in zip(("scale_a", "scale_b"), scales) if v is not None}
    launch = module.prepare(a, b, out, **kwargs, **given)
    launch()
    if key is not None and not plans.capturing(a):
        plans.store(key, plans.make_plan(launch, module.prepare, kwargs, a, b, out, where,
                                         scales))
    return out


def _interpreter_for_cpu_tensors(where: str) -> None:
    """CPU tensors through a Triton stage need the Triton interpreter, which must be on before the
    stage's @triton.jit kernel is imported. Without a GPU the lab switches it on (as its CPU mode
    does); with one, it would turn every Triton kernel of the process into a slow interpreted one,
    so the user has to ask for it."""
    import os

    import torch

    import sys

    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    if torch.cuda.is_available():
        raise LabError(f"{where} runs CPU tensors only under the Triton interpreter; move them to "
                       f"the GPU with .cuda(), or set TRITON_INTERPRET=1 before importing the lab")
    if "triton.language" in sys.modules:  # its own @jit helpers (tl.cdiv) were made compiled
        raise LabError(f"{where} runs CPU tensors under the Triton interpreter, which must be on "
                       f"before Triton is imported, and something imported Triton first (as "
                       f"torch.compile does); set TRITON_INTERPRET=1 in the environment before "
                       f"starting Python")
    os.environ["TRITON_INTERPRET"] = "1"


def _refuse_compiled_kernels(where: str) -> None:
    """Triton kernels imported before the interpreter was switched on are compiled for the GPU."""
    from lab.toolchain.triton import kernels_interpreted

    if kernels_interpreted() is False:
        raise LabError(f"{where} was loaded for the GPU and cannot run CPU tensors; move them to "
                       f"the GPU with .cuda(), or set TRITON_INTERPRET=1 before importing the lab")
