# Session 19, call 2: persistent cast + transpose variants (bench/lab/cast_lab.cu P<TR,TC,SB>: each block loops over
# tiles with the next tile's loads in flight while it stores) against the production tile kernel (V<64,64,8> =
# fp8_cast) at the 8B L8 step's shapes; each checked bit for bit against fp8_cast. Floor: 4 bytes per element at
# ~4.0-4.3 TB/s (copies). Prediction: if the production kernel is limited by reads in flight (its blocks stop reading
# while they store), the persistent one moves 3.6-4.0 TB/s against 3.0-3.2.
set -u
source bench/gpu_env.sh
carry/cast_lab
carry/cast_lab 8192x6144 8192x1024 4096x4096 128256x4096
