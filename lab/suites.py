"""Shape suites: the GEMMs of real models and of public benchmarks, as data.

`--sizes llm` (or `deepseek`, `kernelbench`, in any comma list, with an M filter such as
`llm@1-64`: lab/shapes.py parses it) stands for a suite's shapes; each row of such a shape is
labelled with its model and layer (Row.model, Row.layer) and, unless --layout is given, runs in
the operand layout the suite declares. docs/SUITES.md says where every list comes from.

A suite is a tuple of entries: model, layer, a short tag for the terminal table, M, N, K and the
layout (BLAS naming, lab/axes.py: `nt` = B stored transposed, as a Linear layer's weight W (N x K)
is: y = x @ W^T). This module imports nothing of the lab, so any command may read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One GEMM of a suite: C (M x N) = A (M x K) @ B (K x N), in `layout`."""

    model: str  # "Llama-2-7B", "DeepSeek-V3", "KernelBench L1"
    layer: str  # "qkv", "kv_b", "1_Square_matrix_multiplication_"
    tag: str  # the table's short label: "L2-7B qkv"
    M: int
    N: int
    K: int
    layout: str  # nn, nt, tn, tt

    @property
    def size(self) -> str:
        return f"{self.M}x{self.N}x{self.K}"


@dataclass(frozen=True)
class Suite:
    name: str  # what --sizes takes
    title: str  # one line
    layout: str  # the layout its entries run in: "nt", or "per problem"
    source: str  # where the list comes from (docs/SUITES.md has the details)
    entries: tuple[Entry, ...]

    @property
    def ms(self) -> list[int]:
        """Its M values, ascending."""
        return sorted({e.M for e in self.entries})


# ------------------------------------------------------------------------------------------ llm
# tritonbench's llama_shapes() (pytorch-labs/tritonbench, tritonbench/utils/triton_op.py), which
# `tritonbench --op gemm --llama` runs: (K, N) of each layer, the comment there says "attn: wqkv,
# wo; ffn: w13, w2". Llama-3-70B and -405B are one GPU's shard at tensor parallel 8. tritonbench
# takes every power of two 1..65536 as M; this suite takes seven of them, decode to prefill.
LLM_M = (1, 16, 64, 256, 1024, 4096, 16384)
_LLAMA = (  # (model, tag prefix, ((layer, K, N), ...))
    ("Llama-2-7B", "L2-7B",
     (("qkv", 4096, 12288), ("o_proj", 4096, 4096), ("gate_up", 4096, 22016),
      ("down", 11008, 4096))),
    ("Llama-3-70B TP8", "L3-70B",
     (("qkv", 8192, 1280), ("o_proj", 1024, 8192), ("gate_up", 8192, 7168),
      ("down", 3584, 8192))),
    ("Llama-3-405B TP8", "L3-405B",
     (("qkv", 16384, 2304), ("o_proj", 2048, 16384), ("gate_up", 16384, 13312),
      ("down", 6656, 16384))),
)
LLM = Suite(
    "llm", "Llama-2-7B, Llama-3-70B and Llama-3-405B (TP8) linear layers, tritonbench's --llama "
    "shapes", "nt", "pytorch-labs/tritonbench tritonbench/utils/triton_op.py llama_shapes()",
    tuple(Entry(model, layer, f"{short} {layer}", m, n, k, "nt")
          for m in LLM_M for model, short, layers in _LLAMA for layer, k, n in layers))

# ------------------------------------------------------------------------------------- deepseek
# DeepGEMM's normal-GEMM test shapes (deepseek-ai/DeepGEMM, tests/generators.py,
# enumerate_normal(): bf16_output_nk at m_fwd_list = 1, 128, 4096), (N, K) each. DeepGEMM names
# none of them; the layer names are the DeepSeek-V3 reference model's (deepseek-ai/DeepSeek-V3,
# inference/model.py), each one's (K, N) worked out from inference/configs/config_671B.json
# (dim 7168, q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64, 128 heads of
# qk_nope_head_dim 128 and v_head_dim 128, moe_inter_dim 2048).
DEEPSEEK_M = (1, 128, 4096)
_DEEPSEEK = (  # (layer, N, K)
    ("q_a+kv_a", 2112, 7168),  # wq_a (7168 -> 1536) and wkv_a (7168 -> 512 + 64) in one GEMM
    ("kv_a", 576, 7168),  # wkv_a: the compressed KV (512) and the shared RoPE key (64)
    ("q_b", 24576, 1536),  # wq_b: 1536 -> 128 heads x (128 + 64)
    ("kv_b", 32768, 512),  # wkv_b: 512 -> 128 heads x (128 key + 128 value)
    ("o_proj", 7168, 16384),  # wo: 128 heads x 128 -> 7168
    ("expert gate_up", 4096, 7168),  # an expert's w1 and w3 (7168 -> 2 x 2048) in one GEMM
    ("expert down", 7168, 2048),  # an expert's w2: 2048 -> 7168
)
DEEPSEEK = Suite(
    "deepseek", "DeepSeek-V3's dense GEMMs, DeepGEMM's test shapes", "nt",
    "deepseek-ai/DeepGEMM tests/generators.py enumerate_normal()",
    tuple(Entry("DeepSeek-V3", layer, f"DSv3 {layer}", m, n, k, "nt")
          for m in DEEPSEEK_M for layer, n, k in _DEEPSEEK))

# ---------------------------------------------------------------------------------- kernelbench
# KernelBench level 1's problems whose forward() is one 2-D matrix product (ScalingIntelligence/
# KernelBench, KernelBench/level1/<file>.py): M, N, K from the file's constants and get_inputs(),
# the layout from where it transposes (A.T: tn, B.T: nt). docs/SUITES.md lists the problems left
# out (batched, 3-D and 4-D operands, scalar, diagonal, triangular) and why.
_KERNELBENCH = (  # (file name without .py, tag, M, N, K, layout)
    ("1_Square_matrix_multiplication_", "KB 1 square", 4096, 4096, 4096, "nn"),
    ("2_Standard_matrix_multiplication_", "KB 2 standard", 2048, 4096, 8192, "nn"),
    ("4_Matrix_vector_multiplication_", "KB 4 matvec", 2048, 1, 1048576, "nn"),
    ("6_Matmul_with_large_K_dimension_", "KB 6 large K", 256, 256, 524288, "nn"),
    ("7_Matmul_with_small_K_dimension_", "KB 7 small K", 32768, 32768, 64, "nn"),
    ("8_Matmul_with_irregular_shapes_", "KB 8 irregular", 8205, 5921, 2949, "nn"),
    ("9_Tall_skinny_matrix_multiplication_", "KB 9 tall-skinny", 32768, 32768, 32, "nn"),
    ("13_Matmul_for_symmetric_matrices", "KB 13 symmetric", 4096, 4096, 4096, "nn"),
    ("16_Matmul_with_transposed_A", "KB 16 A.T", 2048, 4096, 8192, "tn"),
    ("17_Matmul_with_transposed_B", "KB 17 B.T", 2048, 4096, 8192, "nt"),
    ("18_Matmul_with_transposed_both", "KB 18 A.T B.T", 2048, 4096, 8192, "tt"),
)
KERNELBENCH = Suite(
    "kernelbench", "KernelBench level 1's plain 2-D matrix products", "per problem",
    "ScalingIntelligence/KernelBench KernelBench/level1/1_...18_*.py",
    tuple(Entry("KernelBench L1", name, tag, m, n, k, layout)
          for name, tag, m, n, k, layout in _KERNELBENCH))

# ---------------------------------------------------------------------------------------- longk
# Few output tiles and a long K: the shapes where split-K decides a GEMM's speed (an output of
# fewer tiles than the GPU has SMs leaves most SMs idle unless K is split). The lab's split rule
# (lab/base/splitk.py) was drawn from 320 x 192 x 786432; these 22 test it elsewhere: M and N from 1
# to 512 (a row vector times a matrix, M = 1, and a matrix times a vector, N = 1, among them), K
# from 2^17 to 2^20, odd sizes that no tile divides. Not from a model: a spread chosen for the rule.
_LONGK = (  # (M, N, K)
    (320, 192, 786432), (256, 256, 524288), (512, 512, 131072), (500, 300, 262144),
    (128, 128, 1048576), (64, 64, 1048576), (97, 211, 393217), (16, 16, 1048576),
    (33, 65, 655361), (200, 500, 131072), (384, 128, 262144), (8, 512, 524288),
    (512, 8, 524288), (255, 257, 300000), (130, 70, 999999), (2, 3, 1048576),
    (1, 512, 1048576), (1, 257, 524288), (1, 100, 131073), (512, 1, 1048576),
    (300, 1, 786433), (1, 1, 1048576),
)
LONGK = Suite(
    "longk", "few-tile, long-K products: where split-K decides the speed", "nn",
    "the lab's own spread for its split rule (lab/base/splitk.py)",
    tuple(Entry("long K", f"{m}x{n}", f"long-K {m}x{n}", m, n, k, "nn") for m, n, k in _LONGK))

SUITES: dict[str, Suite] = {s.name: s for s in (LLM, DEEPSEEK, KERNELBENCH, LONGK)}

_TAGS = {(e.model, e.layer): e.tag for s in SUITES.values() for e in s.entries}
SEP = " / "  # between the labels of one shape that several entries share


def labels(entries) -> tuple[str, str]:
    """(model, layer) of a row that `entries` share, each joined by SEP: one model named once
    ("KernelBench L1", "1_Square... / 13_Matmul..."), else one model per layer, in order."""
    entries = list(entries)
    if not entries:
        return "", ""
    models = list(dict.fromkeys(e.model for e in entries))
    layers = [e.layer for e in entries]
    return (models[0] if len(models) == 1 else SEP.join(e.model for e in entries),
            SEP.join(layers))


def tag(model: str, layer: str) -> str:
    """The short label of a row's (model, layer), as labels() wrote them ("L2-7B qkv",
    "KB 1 square / KB 13 symmetric"); "" for an unlabelled row; a pair no suite knows (a CSV of
    an older suite) shows as 'model layer'."""
    if not model and not layer:
        return ""
    models, layers = model.split(SEP), layer.split(SEP)
    if len(models) == 1:
        models = models * len(layers)
    if len(models) != len(layers):
        return f"{model} {layer}".strip()
    return SEP.join(_TAGS.get((m, x), f"{m} {x}".strip()) for m, x in zip(models, layers))


def listing(suites=None, rows=None) -> str:
    """The suites (all, or those named) as text: a title line each, then one line per entry
    (model, layer, M, N, K, layout); `rows` gives the entries to show per suite name instead."""
    out = []
    for s in (suites or SUITES.values()):
        entries = rows[s.name] if rows is not None else s.entries
        shapes = len({(e.M, e.N, e.K) for e in entries})
        count = (f"{len(entries)} GEMMs" if shapes == len(entries) else
                 f"{len(entries)} GEMMs of {shapes} shapes")
        out.append(f"{s.name}: {s.title}; layout {s.layout}; {count} (from {s.source})")
        width_model = max(len(e.model) for e in entries)
        width_layer = max(len(e.layer) for e in entries)
        out.append(f"  {'model':<{width_model}}  {'layer':<{width_layer}}  {'M':>6} {'N':>6} "
                   f"{'K':>8}  layout")
        for e in entries:
            out.append(f"  {e.model:<{width_model}}  {e.layer:<{width_layer}}  {e.M:>6} "
                       f"{e.N:>6} {e.K:>8}  {e.layout}")
    return "\n".join(out)
