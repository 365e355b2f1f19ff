#!/usr/bin/env python3
"""bf16 GEMM rates through PyTorch (cuBLAS) on the GPU, operands already bf16 (no casts): the
square 8192^3 product and the linear layers of the Megatron-Core weak-scaling models
(Megatron-LM's README, its performance table; tokens = micro-batch 1 x sequence 4096 over TP), forward
shapes y = x w^T.  Each shape: the median of 20 after 3 warm-ups, timed with CUDA events.
Calibration data for mgt-plan's GEMM efficiency (mgt-plan(5)).  Not a test."""
import statistics
import torch

def rate(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    def one():
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); torch.matmul(a, b.t()); e.record(); e.synchronize()
        return s.elapsed_time(e) / 1e3
    for _ in range(3): one()
    t = statistics.median(one() for _ in range(20))
    return 2.0 * m * n * k / t / 1e12

print("gemm bf16 8192^3 (torch): %.1f TFLOP/s" % rate(8192, 8192, 8192))
for h, tp in ((2304, 1), (4096, 4), (8192, 8), (12288, 8), (20480, 8)):
    T = 4096
    for name, n, k in (("qkv", 3 * h // tp, h), ("proj", h, h // tp), ("fc1", 4 * h // tp, h), ("fc2", h, 4 * h // tp)):
        print("gemm bf16 h=%d tp=%d %s %dx%dx%d: %.1f TFLOP/s" % (h, tp, name, T, n, k, rate(T, n, k)))
