# Session 19, call 4: calls 2 and 3 falsified reads in flight and tile order as what holds the cast + transpose at
# ~3 TB/s. Where the time goes: the production kernel writing only qt (3 bytes per element), one tile per block
# writing only q (3), and reading only (2, the amax), each against the bytes it moves. Prediction: a part near the
# copy rate (~4 TB/s) is not the limit; the slow one is.
set -u
source bench/gpu_env.sh
carry/cast_lab 8192x4096 8192x28672 128256x4096 | grep -E 'shape|fp8_cast|only|V<64,64,8>'
