"""Variant files of the Triton twins (../shared/DESIGN.md rule 13, docs/ARCHITECTURE.md "Lessons
and variants"): triton_kernels/<stage>.py is the stage's lesson, its kernel written out for the
lesson case, and triton_kernels/variants/<stage>.py holds the twin's former, general kernel
unchanged (under the same name, so rows, lab.profile and the tuner see one stage) with the launch
code of what the lesson leaves out (for example tiled's precisions other than fp32, warptiling's
split-K and realign, double_buffered's realign; each file's docstring says what it holds). The
stage's prepare() runs the variant for exactly those cases; for the lesson case the two kernels
compile to the same PTX (tests/test_lessons_triton_variants.py for the fp32 ladder)."""
