"""The roofline's peaks for a profile: the compute roof of the --precision (the FP32 SIMT peak for
fp32, the precision's tensor-core peak from lab/peaks.py otherwise, on this GPU or on the H100
anchors without one), the DRAM roof, and the words naming that roof in the table's caption."""

from __future__ import annotations

from lab.base.errors import LabError


def roof_label(precision: str) -> str:
    """What the compute roof of `precision` is: the FP32 SIMT pipe, or the tensor cores."""
    from lab.base.precisions import get

    r = get(precision)
    if not r.tensor_cores:
        return "FP32 SIMT"
    if r.products > 1:
        return f"{precision} ({get(r.peak_units).word} tensor-core peak / {r.products})"
    return f"{precision} tensor-core"


def _device():
    """(name, compute capability, SMs, max SM clock in MHz) of the current GPU; None without one
    (lab/roofline.py current_device)."""
    from lab.roofline import current_device

    return current_device()


def precision_peaks(precision: str, bw: float):
    """The roofline's peaks for `precision`: fp32 the FP32 SIMT peak (lab/roofline.py), any other
    precision its tensor-core peak from lab/peaks.py (SMs x FLOP per SM per clock x max SM clock)
    on this GPU, or on the H100 anchors (132 SMs, 1.98 GHz, sm_90) without one."""
    from lab import roofline
    from lab.peaks import peak

    if precision == "fp32":
        return roofline.device_peaks(bw) or roofline.Peaks(roofline.DEFAULT_PEAKS.flops, bw,
                                                           roofline.DEFAULT_PEAKS.source)
    dev = _device()
    if dev is None:
        name, cc, sms, mhz = ("H100 SXM anchors", (9, 0), roofline.H100_SMS,
                              roofline.H100_SM_CLOCK_HZ / 1e6)
    else:
        name, cc, sms, mhz = dev
    p = peak(precision, cc, sms, mhz)
    if p is None:
        raise LabError(f"lab/peaks.py knows no {precision} peak for compute capability "
                       f"{cc[0]}.{cc[1]} ({name}); give the roof with --peak-tflops")
    return roofline.Peaks(p.tflops * 1e12, bw,
                          f"{name}: {sms} SMs x {p.flop_per_sm_clock:g} FLOP/clock "
                          f"({roof_label(precision)}) x {mhz / 1e3:.2f} GHz; "
                          f"DRAM {bw / 1e12:.2f} TB/s")


def peaks_for(args):
    from lab import roofline

    bw = args.peak_bw * 1e12
    precision = getattr(args, "precision", "fp32")
    if args.peak_tflops:
        return roofline.Peaks(args.peak_tflops * 1e12, bw,
                              f"{roof_label(precision)} peak given on the command line")
    return precision_peaks(precision, bw)
