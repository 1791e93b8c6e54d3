# Session 21, call 6: bench/lab/phase_lab with AdamW in slices (carry/phase_lab from `make build`): the cycle of call 5
# (140 GEMMs, then AdamW over 2.8 G parameters) against AdamW in 7 and 35 slices, each after 20 / 4 of the GEMMs (the
# optimizer spread over the next forward layer by layer: low-power phases between GEMMs, as the torch peer's step has
# its Triton kernels). Question: do the GEMMs run faster with the same memory-bound work spread between them?
# Prediction: if the power limiter lets the clock recover after each low-power phase, the 35-slice cycle is 1-3% shorter
# than the one-block cycle (call 5: the GEMMs after one AdamW block took 194.3 ms against 196.4 alone).
set -u
source bench/gpu_env.sh
carry/phase_lab 2800 140 48 7,35
