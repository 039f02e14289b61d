"""What `python -m lab.profile` runs (lab/profile.py is the command: its options, their checks and
main(); docs/PROFILING.md tells the whole story). One module per concern, each importing only
those listed above it, none importing lab/profile.py:

    targets.py         what is profiled: Target, ncu's kernel filter, the child's command line
    roof.py            the roofline's peaks for the --precision, and the roof's name
    ncu_table.py       the ncu counters' table and CSV
    child.py           the child process ncu runs ("the target", --_target): one checked launch
    ncu_run.py         running ncu on each target and reading its report back; --dry-run
    triton_capture.py  a Triton stage's launch recorded, then compiled without launching
    listings.py        --sass/--ptx: listings, instruction mixes, resources, the mix CSV
    static.py          the static view shown without a GPU

Importing this package imports none of them.
"""
