# Session 19, call 11: the tile kernel's read-only pass moved ~2.2 TB/s (call 4). Read-only passes of other shapes
# (bench/lab/cast_lab.cu "R" rows: the amax of x read as TR x TC regions, every load issued first; and one flat
# stream): if the wide regions (512-byte rows) or the stream reach ~4 TB/s and 64 x 64 stays at ~2.2, the tile's
# 128-byte row pieces are what the cast kernel pays for; if every region shape is slow, it is something else.
set -u
source bench/gpu_env.sh
carry/cast_lab 8192x4096 8192x28672 128256x4096 | grep -E 'shape|fp8_cast|V<64,64,8>|R |read only'
