"""The kernel-agnostic harness of the matmul kernel lab (see docs/ARCHITECTURE.md)."""
