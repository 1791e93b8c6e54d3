# Session 20, call 2: cast_lab's staged variants A<TR,TC,SB,G> (cp.async copies of the tile's bf16 rows into shared
# memory, all in flight without registers; the cast from there, not unrolled: 31-40 registers) against the production
# kernel with every pass's loads first (V rows; call 1: 128 x 128 tiles held 116 registers, 2 blocks per SM, slower).
# Prediction: the staged 64 x 128 and 128 x 128 tiles (~128 KB in flight per SM) 3.8-4.3 TB/s at the large shapes;
# grouped tile orders (G > 0) a further few % if the writes' locality matters.
set -u
source bench/gpu_env.sh
carry/cast_lab 8192x4096 8192x28672 4096x14336 128256x4096 | grep -E '^#|shape|fp8_cast|V<|A<|R 128|R stream|DIFFERS'
