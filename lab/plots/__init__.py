"""The figures of `python -m lab.plot` (lab/plot.py is the command; its docstring describes each
figure). One module per concern, each importing only those above it:

    common.py     shared pieces: sizes, fonts, colours and labels, reading a lab.compare or
                  lab.profile CSV and the rows a figure draws, titles from the environment files,
                  the cuBLAS = 100% line and siboehm/SGEMM_CUDA's marks, point labels, the stage
                  palette
    ladder.py     ladder.png: % of cuBLAS per stage
    sweep.py      sweep.png: TFLOP/s against problem size
    roofline.py   roofline.png: intensity against achieved TFLOP/s under the roofs
    occupancy.py  occupancy.png: TFLOP/s against theoretical occupancy (categories)
    suites.py     suites.png: % of cuBLAS per model layer and M (a shape suite's rows)
    build.py      figures() and draw(): every figure the CSVs support, written as PNGs
"""
