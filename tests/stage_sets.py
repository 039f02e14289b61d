"""Which registered stages the registry-wide tests run on float32 tensors as IEEE fp32.

The mma stage computes only on the tensor cores (tf32, 3xtf32, bf16, fp16), so the tests that call
every stage with float32 operands and an fp32 threshold leave it out; tests/test_mma.py covers it
in each of its precisions."""

from lab.stages import BACKENDS, STAGES

FP32_TRITON = [s for s in STAGES if "fp32" in s.precisions_for("triton")]
FP32_CUDA = [s for s in STAGES if "fp32" in s.precisions_for("cuda")]
FP32_CASES = [(s, b) for s in STAGES for b in BACKENDS if "fp32" in s.precisions_for(b)]
