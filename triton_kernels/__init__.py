"""Triton stages: <stage>.py holds the @triton.jit kernel and its prepare() launcher."""
