"""The user-facing docs speak to the lab's users, not to the people who built it.

README.md, every docs/**/*.md and results/README.md are scanned for words that only mean something
inside the project's own process: "the issue" / "issue 3" / "the issue's target" (a task of the
project, not a reference a reader can open), "seed 002" (a task-list name), "run 03" (say the file:
results/2026-11-22-h100/03-....csv), "lent" (say which GPU: NVIDIA H100 80GB HBM3), "the lead" /
"lead's" (say what the file records), and "public ladder" without naming it (siboehm/SGEMM_CUDA,
https://github.com/siboehm/SGEMM_CUDA, on the same or a neighbouring line), plus paths outside this
repository (../shared/...). Each hit is reported as file:line.

Allowed on purpose: "issue" as a verb or in "issue slots" (the GPU issues instructions), "seed" as
the random seed (`--seed 3`, "seed 0"), "target" in any sense (the profiler's `--_target` child,
a compile target). File names that contain `issue2` (03-ladder-issue2-3.csv) are names, not prose.
CPU only.
"""

import re
from pathlib import Path

import pytest

from helpers import ROOT


# Nouns after "the issue" that make it the GPU's instruction issue, not a task of the project.
_ISSUE_NOUNS = r"slots?|rates?|width|ports?|stalls?|queues?|bandwidth|logic|stage|cycles?|limits?"
# Words after "issue <number>" / "run <number>" that make the number a count, not a name.
_COUNTED = (r"instructions?|loads?|stores?|warps?|FFMAs?|FMAs?|requests?|LDS\S*|LDG\S*|STS\S*|"
            r"STG\S*|wavefronts?|times|repetitions|reps|rounds|iterations|per\b|x\b|ms\b|s\b|"
            r"seconds|minutes|%")

# (what the hit is and what to write instead, its pattern); every pattern ignores case
_RULE_PATTERNS = {
    "'the issue' / 'this issue' (a project task; name the source instead)":
        rf"\b(?:the|this)\s+issue\b(?!\s+(?:{_ISSUE_NOUNS})\b)(?!'s)",
    "'issue's' (a project task's goal; state the fact and its source)": r"\bissue[’']s\b",
    "'issue <number>' (a project task; say what it was)":
        rf"(?<!-)\bissue(?:\s+#?\s*|\s*#\s*|-)\d+\b(?!\s+(?:{_COUNTED}))",
    "'seed 0NN' (a task-list name, not the random seed)": r"\bseed[\s_-]?0\d\d\b",
    "'run NN' (name the results file instead)": rf"\brun\s+\d\d\b(?!\s*(?:{_COUNTED}))",
    "'lent' (name the GPU: NVIDIA H100 80GB HBM3)": r"\blent\b",
    "'the lead' / 'lead's' (say what the file records)":
        r"\bthe\s+lead\b(?!\s+(?:over|shrinks|grows|narrows|widens)\b)|\blead[’']s\b",
    "a path outside this repository": r"\.\./shared/",
}
RULES: list[tuple[str, re.Pattern]] = [(rule, re.compile(pattern, re.I))
                                       for rule, pattern in _RULE_PATTERNS.items()]
PUBLIC_LADDER = re.compile(r"\bpublic\s+(?:SGEMM\s+)?ladder", re.I)
NAMES_IT = re.compile(r"SGEMM_CUDA", re.I)


def pages() -> list[Path]:
    """The pages a user reads: README.md, every docs/**/*.md and every results/**/README.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / "results").glob("**/README.md"))]


def doc_files() -> list[Path]:
    """pages(), results/files.txt and every scripts/**/README.md, those that exist."""
    files = [*pages(), ROOT / "results" / "files.txt",
             *sorted((ROOT / "scripts").glob("**/README.md"))]
    return [f for f in files if f.is_file()]


def hits_in(text: str, name: str) -> list[str]:
    """'name:line: rule: the line' for every internal word in `text`."""
    found = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        for rule, pattern in RULES:
            if pattern.search(line):
                found.append(f"{name}:{i + 1}: {rule}: {line.strip()}")
        if PUBLIC_LADDER.search(line):
            near = " ".join(lines[max(0, i - 1): i + 2])
            if not NAMES_IT.search(near):
                found.append(f"{name}:{i + 1}: 'public ladder' without naming it "
                             f"(siboehm/SGEMM_CUDA) on this or a neighbouring line: {line.strip()}")
    return found


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_speak_to_users(path):
    hits = hits_in(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert not hits, "internal words in user docs:\n" + "\n".join(hits)


def test_the_scanned_files_include_the_docs():
    names = {str(p.relative_to(ROOT)) for p in doc_files()}
    assert {"README.md", "results/README.md", "docs/ARCHITECTURE.md", "docs/GLOSSARY.md",
            "docs/stages/naive.md", "results/files.txt", "results/2026-11-25-h100/README.md",
            "scripts/experiments/README.md"} <= names


@pytest.mark.parametrize("text", [
    "This beats the issue's target (>= 34%).",
    "and the issue's >= 34 / 51 / 62% targets",
    "as the issue asks",
    "closed by this issue",
    "see issue 3",
    "Issue #12 fixed it",
    "the issue-4 pages",
    "Seed 002 profiles a matmul",
    "`tiled` was at 18.2% in run 03.",
    "Measured on the lent H100",
    "a typo of the lead's",
    "as the lead asked",
    "recorded in `../shared/DESIGN.md`",
    "the public ladder's 2D blocktiling is at 50.3%",
])
def test_the_rules_catch_internal_words(text):
    assert hits_in(text, "x.md"), text


@pytest.mark.parametrize("text", [
    "An H100 SM issues 4 warp-FFMAs per clock",
    "a warp issues 36 shared loads",
    "lets the compiler issue the unrolled iterations' loads back to back",
    "and spends issue slots on the loop counter",
    "the issue rate of the FMA pipe",
    "the scheduler can issue 1 instruction per clock",
    "`results/2026-11-22-h100/03-ladder-issue2-3.csv`",
    "`11-issue2-done.csv`",
    "python -m lab.compare --stage coalesced --seed 3",
    "Python 3.12.3, seed 0. Every row",
    "the child process, the *target* (`python -m lab.profile --_target cuda`)",
    "run 10 times",
    "the CUDA kernel leads at every size; the lead over Triton shrinks at 1025",
    "SGEMM_CUDA's 1D-to-2D step; the public ladder\nof siboehm",
    "above the 33.4% of siboehm/SGEMM_CUDA's 1D-blocktiling kernel",
])
def test_the_rules_allow_ordinary_uses(text):
    assert not hits_in(text, "x.md"), hits_in(text, "x.md")


# ------------------------------------------------------------------ the glossary is linked

GLOSSARY = ROOT / "docs" / "GLOSSARY.md"
# anchor in docs/GLOSSARY.md -> how a newcomer meets the term in the README or the results pages
TERMS = {
    "percent-of-cublas": r"% of cuBLAS",
    "cublas": r"\bcuBLAS\b",
    "fp32": r"\bfp32\b",
    "tf32": r"(?<![x\w])TF32\b",
    "3xtf32": r"\b3xTF32\b",
    "bf16-and-fp16": r"\b(?:bf16|fp16)\b",
    "median-p20-p80": r"\bp20/p80\b",
    "l2-flush": r"\bL2 flush",
    "noise-and-repeats": r"\bnoise\b",
    "roofline": r"\broofline\b",
    "occupancy": r"\boccupancy\b",
    "nsight-compute": r"\bNsight Compute\b",
    "sgemm-cuda": r"\bSGEMM_CUDA\b",
    "sm-90-and-sm-90a": r"\bsm_90a?\b",
    "tensor-cores": r"\btensor[- ]cores?\b",
    "mma-sync": r"\bmma\.sync\b",
    "ldmatrix": r"\bldmatrix\b",
    "wgmma": r"\bwgmma\b",
    "cp-async": r"\bcp\.async\b",
    "block-rasterization": r"\bblock rasterization\b|\bgrouped block order\b",
    "warp-tiling-parameters": r"\bWNITER\b",
    "split-k": r"\bsplit-K\b",
    "shape-bucket": r"\bshape bucket\b|:a128\b",
    "layouts": r"--layout\b|\blayout nn\b",
    "autotuner": r"\bautotuner\b",
    "nvrtc": r"\bNVRTC\b",
}


def glossary_anchors() -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', GLOSSARY.read_text(encoding="utf-8")))


def newcomer_text(path: Path) -> str:
    """What a newcomer reads: the README without its "Set up" section (its commands belong to
    another page's owner) and without the generated summary's glossary-free command lines."""
    text = path.read_text(encoding="utf-8")
    if path.name == "README.md" and path.parent == ROOT:
        start = text.index("## Set up")
        end = text.index("\n## ", start + 1)
        text = text[:start] + text[end:]
    return text


def test_the_glossary_defines_every_term_it_is_asked_for():
    assert set(TERMS) <= glossary_anchors()


@pytest.mark.parametrize("name", ["README.md", "results/README.md"])
def test_every_term_a_newcomer_meets_points_to_the_glossary(name):
    text = newcomer_text(ROOT / name)
    unlinked = [anchor for anchor, pattern in TERMS.items()
                if re.search(pattern, text) and f"GLOSSARY.md#{anchor})" not in text]
    assert unlinked == [], f"{name} uses these terms without a link to docs/GLOSSARY.md#..."


def test_every_link_into_the_glossary_names_an_entry_it_has():
    anchors = glossary_anchors()
    for page in pages():
        for anchor in re.findall(r"GLOSSARY\.md#([\w-]+)", page.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{page.relative_to(ROOT)}: #{anchor}"


# anchor -> a word of the GPU or the profiler as a stage page uses it. A stage page that uses the
# word links the entry (at its first use, by hand; this checks that the link is there).
STAGE_TERMS = {
    "sector": r"\bsectors?\b",
    "wavefront": r"\bwavefronts?\b",
    "broadcast": r"\bbroadcasts?\b",
    "carveout": r"\bcarveouts?\b",
    "lg-throttle": r"\blg_throttle\b",
    "mio-throttle": r"\bmio_throttle\b",
    "issue-slot": r"\bissue\s+slots?\b",
    "epilogue": r"\bepilogues?\b",
    "wave-quantization": r"\bwave[- ]quantization\b",
    "warpgroup": r"\bwarpgroups?\b",
    "ptxas": r"\bptxas\b",
    "leading-dimension": r"\bleading\s+dimensions?\b",
    "cp-async": r"\bcp\.async\b(?!\.bulk)",
    "tensor-cores": r"\btensor[- ]cores?\b",
    "wgmma": r"(?<![\w.])wgmma\b(?![.\w])",
    "mbarrier": r"\bmbarriers?\b",
    "swizzle": r"\bswizzl",
    "occupancy": r"\boccupancy\b",
    "split-k": r"\bsplit-K\b",
    "cublas": r"\bcuBLAS\b",
}


@pytest.mark.parametrize("page", sorted((ROOT / "docs" / "stages").glob("*.md")),
                         ids=lambda p: p.name)
def test_every_stage_page_links_the_glossary_words_it_uses(page):
    from lab.lesson import BEGIN, END

    text = page.read_text(encoding="utf-8")
    if BEGIN in text:  # the generated diff is kernel code, not prose
        text = text.split(BEGIN)[0] + text.split(END, 1)[1]
    assert set(STAGE_TERMS) <= glossary_anchors()
    unlinked = [anchor for anchor, pattern in STAGE_TERMS.items()
                if re.search(pattern, text) and f"GLOSSARY.md#{anchor})" not in text]
    assert unlinked == [], f"{page.name} uses these words without a link to docs/GLOSSARY.md#..."
