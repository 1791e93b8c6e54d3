# Session 20, call 5: call 4's vector cast kernel with the sources' reads split from their arithmetic (ops/cuda/
# fp8_cast.cuh: src.fetch(r, c) returns the raw reads, src.values(raw, ...) computes the 8 values), so a thread holds
# 8 rows' raw reads in flight instead of 64 computed floats (SwiGLU's backward, two halves: 4 rows at a time). Call 4:
# plain casts 6-15% faster, but SwiGLU's backward held 254 registers (one block per SM): activation bwd +1 ms, the step
# unchanged. Registers now (ptxas here): Bf16Source 60, gelu / sqrelu 62, their backward 94, SwiGLU 94, its backward
# 121, the logit gradients 80, norms 87. Prediction: activation bwd back to <= 3.3 ms, the other cast-type ops as in
# call 4 or better: the step -1 to -2 ms. Losses bit for bit the HEAD build's.
# The commands: call 4's script, run again on this build.
bash "$(dirname "$0")/../call4/call4.sh"
