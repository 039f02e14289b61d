"""lab.matmul's plan cache: resolve a call once per signature, then replay it on new tensors.

`lab.matmul(a, b, stage=..., out=c)` does a lot before its kernel runs: it resolves the stage,
its parameters and the precision, checks the operands, describes their layouts, looks up (or
compiles) the build and the launch geometry, and wraps the tensors for the launch. None of that
depends on the tensors' values, only on their *signature*: shapes, strides, dtypes, device,
16-byte alignment of each data pointer (the only alignment a launcher looks at), the stage,
backend, precision and parameters, and the current CUDA device and stream. So the first call of a
signature takes the full road (prepare(), lab/base/entry.py) and keeps a `Plan`; a later call with
the same signature only checks what depends on the tensors themselves (that `out` does not
overlap A or B) and replays the plan's steps with the new tensors put in.

What a plan replays: the launch's `steps` (lab/base/contract.py Prepared.steps), a sequence of
`(run, args)` pairs -- kernel launches and tensor copies -- in which each argument that was one of
the call's tensors (A, B, C, or a transposed view of one: a column-major C leads to those) is
swapped for the new call's. Everything else in the arguments (sizes, strides, a split-K
workspace, a buffer for a C with no unit stride) is part of the plan and reused. A plan is made
only when that is safe:
- the launch declares its steps (a launcher that builds an opaque closure has none);
- prepare() copied nothing of the operands' values outside the call (a `setup_ms` of zero, or
  a launch that says its setup is reusable: `setup_reusable`, e.g. zeroed buffers that every
  call refills): a copy of values (a zero-padded or compacted operand) would be stale on the
  next call;
- every tensor argument that is not one of the call's tensors lies outside their memory (a
  launcher that passes a view of an operand it made itself could not be replayed correctly).
Otherwise the signature is still cached, and each call prepares again (correct, slower).

While a CUDA graph is being captured, lab.matmul takes the full road and caches nothing: a plan's
reused buffers would be shared with the graph.

A call with no stage (stage "auto": lab/dispatch.py picks one) is keyed by the stage "auto" and
the backend as given (None: any), so the choice is made on the first call of a signature and
replayed with its launch after that.

This module sits at the bottom of the lab beside lab.base: it imports only lab.toolchain.nvrtc
(the current stream).
"""

from __future__ import annotations

from collections import OrderedDict

from lab.toolchain.nvrtc import current_stream_ptr

MAX_PLANS = 128  # signatures kept (least recently used dropped first)

_PLANS: "OrderedDict[tuple, Plan]" = OrderedDict()


def _tensor_sig(t) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.data_ptr() % 16)


def _scale_sig(s):
    """fp8's scale as a key: a tensor's signature, a number's value (a plan bakes a number into a
    tensor of its own), None as None; raises TypeError for anything else (not cacheable)."""
    import torch

    if s is None:
        return None
    if type(s) is torch.Tensor:
        return ("tensor",) + _tensor_sig(s)
    if isinstance(s, (int, float)) and not isinstance(s, bool):
        return ("value", float(s))
    raise TypeError("a scale that is neither a tensor nor a number")


def signature(a, b, out, stage: str, backend: str, precision, params: dict,
              scales: tuple = (None, None)) -> tuple | None:
    """The cache key of a call, or None when the call has no cacheable signature (an argument that
    is not a tensor, a parameter value that cannot be hashed). CPU tensors (the Triton
    interpreter) are planned too, which is how the CPU tests exercise this module. `scales`:
    fp8's scale_a and scale_b as given."""
    import torch

    if type(a) is not torch.Tensor or type(b) is not torch.Tensor:
        return None
    if out is not None and type(out) is not torch.Tensor:
        return None
    try:
        scale_key = tuple(_scale_sig(s) for s in scales)
    except TypeError:
        return None
    if a.is_cuda:
        device = torch.cuda.current_device()
        where = (device, current_stream_ptr(device))
    else:
        where = None
    try:
        key = (stage, backend, precision, tuple(sorted(params.items())), _tensor_sig(a),
               _tensor_sig(b), None if out is None else _tensor_sig(out), where, scale_key)
        hash(key)
    except TypeError:
        return None
    return key


def lookup(key) -> "Plan | None":
    plan = _PLANS.get(key)
    if plan is not None:
        _PLANS.move_to_end(key)
    return plan


def store(key, plan: "Plan") -> None:
    _PLANS[key] = plan
    _PLANS.move_to_end(key)
    while len(_PLANS) > MAX_PLANS:
        _PLANS.popitem(last=False)


def clear() -> None:
    """Forget every plan (their reused buffers are freed)."""
    _PLANS.clear()


def capturing(a) -> bool:
    """Whether the current CUDA stream is being captured into a graph (for CUDA tensor `a`)."""
    import torch

    return a.is_cuda and torch.cuda.is_current_stream_capturing()


def _extent(t) -> int:
    """Bytes from t's first element to one past its furthest."""
    if t.numel() == 0:
        return 0
    return t.element_size() * (1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())))


def _span(t) -> tuple[int, int]:
    lo = t.data_ptr()
    return lo, lo + _extent(t)


class Plan:
    """One signature's resolved call.

    replay: ((run, template, subs), ...) -- the launch's steps with the call's tensors taken out of
        `template` (None in their place) and `subs` saying which position takes which slot:
        0, 1, 2 = A, B, C as the user passed them; 3, 4, 5 = their transposed views A^T, B^T, C^T
        (a column-major C is computed as C^T = B^T A^T: lab/base/describe.py; a launcher
        may swap too); 6, 7 = fp8's scale_a and scale_b where the user gave them as tensors.
        None: prepare on every call.
    prepare: the stage's public prepare and its keyword arguments, for a plan without replay.
    out_dtype: the dtype of a C the call makes (the operands', fp8's bfloat16).
    a_extent, b_extent, c_extent: bytes each spans (for the overlap check of a given `out`).
    where: "stage <name> (<backend>)", for messages.
    """

    __slots__ = ("replay", "prepare", "kwargs", "c_extent", "a_extent", "b_extent", "derived",
                 "where", "out_dtype")

    def __init__(self, replay, prepare, kwargs: dict, a, b, c, derived: bool, where: str):
        self.replay, self.where = replay, where
        self.prepare = prepare
        self.kwargs = kwargs
        self.out_dtype = c.dtype
        self.a_extent, self.b_extent, self.c_extent = _extent(a), _extent(b), _extent(c)
        self.derived = derived

    def overlap(self, a, b, c) -> str | None:
        """'A' or 'B' when C's memory meets that operand's (the signature cannot tell), else None."""
        c0 = c.data_ptr()
        c1 = c0 + self.c_extent
        for name, t, extent in (("A", a, self.a_extent), ("B", b, self.b_extent)):
            t0 = t.data_ptr()
            if t0 < c1 and c0 < t0 + extent and extent and self.c_extent:
                return name
        return None

    def __call__(self, a, b, c, scales: tuple = (None, None)) -> None:
        if self.replay is None:
            given = {k: v for k, v in zip(("scale_a", "scale_b"), scales) if v is not None}
            self.prepare(a, b, c, **self.kwargs, **given)()
            return
        slots = (a, b, c, a.t(), b.t(), c.t()) if self.derived else (a, b, c, None, None, None)
        slots += tuple(scales)
        for run, template, subs in self.replay:
            if subs:
                args = list(template)
                for pos, slot in subs:
                    args[pos] = slots[slot]
                run(*args)
            else:
                run(*template)


def make_plan(launch, prepare, kwargs: dict, a, b, c, where: str,
              scales: tuple = (None, None)) -> Plan:
    """The Plan of a call whose prepare() returned `launch` for user tensors a, b, c (`where`:
    "stage <name> (<backend>)", for messages; `scales`: fp8's scale_a and scale_b as given)."""
    replay = _replay(launch, a, b, c, scales)
    # transposed views (slots 3-5) are made per call only where a step takes one; fp8's scales
    # (slots 6, 7) are the user's tensors as given
    derived = replay is not None and any(3 <= slot < 6 for _, _, subs in replay for _, slot in subs)
    return Plan(replay, prepare, kwargs, a, b, c, derived=derived, where=where)


def _replay(launch, a, b, c, scales=(None, None)):
    """The steps of `launch` as (run, template, subs), or None when replaying them is not safe."""
    import torch

    # fp8's scales given as tensors: the launch passes them (or a one-element view of one, the
    # same memory) to its kernels; a scale given as a number is the plan's own tensor
    user_scales = [(6 + i, s) for i, s in enumerate(scales) if type(s) is torch.Tensor]

    steps = launch.steps
    p = launch.problem
    if steps is None or (p is not None and p.setup_ms):  # describe() copied an operand's values
        return None
    if launch.setup_ms and not launch.extra.get("setup_reusable"):
        return None
    slots = {id(a): 0, id(b): 1, id(c): 2}
    # a transposed view of a user tensor (describe()'s C^T = B^T A^T, or a launcher's own swap)
    # is found by its pointer, shape and strides; a new call's is made the same way
    views = [(slot, t.t()) for slot, t in ((3, a), (4, b), (5, c)) if t.numel()]
    spans = [_span(t) for t in (a, b, c) if t.numel()] + [_span(s) for _, s in user_scales]
    replay = []
    for run, args in steps:
        template, subs = list(args), []
        for pos, x in enumerate(args):
            if not isinstance(x, torch.Tensor):
                continue
            slot = slots.get(id(x))
            if slot is None:
                slot = next((k for k, v in views if x.data_ptr() == v.data_ptr()
                             and x.shape == v.shape and x.stride() == v.stride()), None)
            if slot is None:  # a user's scale tensor (a per-tensor one possibly as a view)
                slot = next((k for k, v in user_scales if x.data_ptr() == v.data_ptr() and (
                    x.numel() == 1 or (x.shape == v.shape and x.stride() == v.stride()))), None)
            if slot is not None:
                template[pos] = None
                subs.append((pos, slot))
                continue
            if x.numel():  # the plan's own buffer: it must not be (a view of) user memory
                lo, hi = _span(x)
                if any(lo < u1 and u0 < hi for u0, u1 in spans):
                    return None
        replay.append((run, tuple(template), tuple(subs)))
    return tuple(replay)
