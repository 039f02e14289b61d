"""The CUDA mma stage with TF32_RN=0 (the tensor core truncates each TF32 operand, as Triton's
tl.dot does) next to the default TF32_RN=1 (round to nearest, as cuBLAS), through lab.compare.

mma.cu's TF32_RN is a build-time define, not a launcher parameter: this script wraps
cuda_kernels.mma.defines so that every build of this process gets TF32_RN=0, then runs
lab.compare with the arguments it is given (a GPU run; the rows' `stage` column is renamed
`mma[TF32_RN=0]` in the CSV so the two kinds of row cannot be mixed up). Run it next to an
ordinary lab.compare of the same rows:

    python scripts/tf32_truncation.py --stage mma --backend cuda --precision tf32 \
        --sizes 4096,8192 --csv out/tf32-truncated.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from cuda_kernels import mma  # noqa: E402
from lab import compare  # noqa: E402

_defines = mma.defines


def _truncating(*args, **kwargs) -> dict:
    return {**_defines(*args, **kwargs), "TF32_RN": 0}


def main(argv: list[str]) -> int:
    mma.defines = _truncating
    rc = compare.main(argv)
    if "--csv" in argv:
        path = Path(argv[argv.index("--csv") + 1])
        if path.exists():
            df = pd.read_csv(path)
            df.loc[df.backend == "cuda", "stage"] = df.loc[df.backend == "cuda", "stage"].map(
                lambda s: f"{s}[TF32_RN=0]")
            df.to_csv(path, index=False)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
