# Session 20, call 3: cast_lab's register-transpose variants T<BR> (no shared memory: each thread casts an 8 x 8 block,
# 8 loads of 16 bytes held raw, q as 8 row stores, qt as 8 column stores transposed in registers; 64 registers,
# 4 blocks of 256 per SM: ~128 KB of loads in flight per SM). Call 2: every 128-row tile slow (byte gathers with 8-way
# bank conflicts), the staged 64 x 128 tile 3.3-3.8 TB/s. Prediction: T 3.9-4.3 TB/s at the large shapes.
set -u
source bench/gpu_env.sh
carry/cast_lab 8192x4096 8192x28672 4096x14336 128256x4096 | grep -E 'shape|fp8_cast|V<|A<64,128|T<|R 128|R stream|DIFFERS'
