# Session 19, call 3: call 2 falsified "reads in flight" (persistent blocks with the next tile's loads in flight: no
# faster). Next guess: the order of the tiles. The production grid walks columns fastest, so the blocks running at
# once write 64-byte pieces of many different qt rows (each qt row's next 64 bytes come from a block much later).
# Column-major order (C: persistent, C1: one tile per block) walks rows fastest: the blocks running at once fill long
# runs of the same qt rows. Prediction: if DRAM locality of the transposed writes is the limit, C/C1 move > 3.5 TB/s.
set -u
source bench/gpu_env.sh
carry/cast_lab 8192x4096 8192x14336 8192x28672 14336x4096 8192x6144 128256x4096
