"""The CUDA mma stage built with another TF32_RN than the default 1, through lab.compare:
0 (the tensor core truncates each TF32 operand, as Triton's tl.dot does) or 2 (the guarded
half-unit add instead of cvt.rn.tf32.f32; cuda_kernels/variants/mma.cu's tf32_rn).

cuda_kernels/variants/mma.cu's TF32_RN is a build-time define, not a launcher parameter: this
script wraps cuda_kernels.mma.defines so that every build of this process gets the value given by
--tf32-rn (default 0), then runs lab.compare with the other arguments (a GPU run; the rows'
`stage` column is renamed `mma[TF32_RN=0]` in the CSV so the two kinds of row cannot be mixed
up). Run it next to an ordinary lab.compare of the same rows:

    python scripts/experiments/tf32_truncation.py --stage mma --backend cuda --precision tf32 \
        --sizes 4096,8192 --csv out/tf32-truncated.csv
    python scripts/experiments/tf32_truncation.py --tf32-rn 2 --stage mma ... --csv out/tf32-add.csv
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pandas as pd  # noqa: E402

from cuda_kernels import mma  # noqa: E402
from lab import compare  # noqa: E402

_defines = mma.defines


def main(argv: list[str]) -> int:
    value = 0
    if "--tf32-rn" in argv:
        i = argv.index("--tf32-rn")
        if i + 1 >= len(argv) or argv[i + 1] not in ("0", "2"):
            print("error: --tf32-rn takes 0 (truncate) or 2 (the guarded add); 1 is the default "
                  "build, which plain lab.compare runs", file=sys.stderr)
            return 2
        value = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    mma.defines = lambda *args, **kwargs: {**_defines(*args, **kwargs), "TF32_RN": value}
    rc = compare.main(argv)
    if "--csv" in argv:
        path = Path(argv[argv.index("--csv") + 1])
        if path.exists():
            df = pd.read_csv(path)
            df.loc[df.backend == "cuda", "stage"] = df.loc[df.backend == "cuda", "stage"].map(
                lambda s: f"{s}[TF32_RN={value}]")
            df.to_csv(path, index=False)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
