"""Raw CUDA C++ stages: <stage>.cu holds the kernel, <stage>.py its launcher (a prepare() factory)."""
