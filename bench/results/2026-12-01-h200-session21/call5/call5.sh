# Session 21, call 5: bench/lab/phase_lab (carry/phase_lab from `make build`): a cycle shaped like the 8B L8 step
# (140 GEMMs [8192 x 4096] x [4096 x 14336]^T, then AdamW over 2.8 G parameters), AdamW on all SMs or in a green
# context of 48 / 66 / 88 SMs. Question: does AdamW on fewer SMs (less switching power in its phase) let the GEMMs after
# it run at a higher clock under the 700 W cap? Prediction: if the step is bound by energy, the cycle's GEMM part is
# 1-3% faster with AdamW on 66 SMs and the cycle shorter though AdamW alone is slower; if not, the GEMMs are unchanged.
set -u
source bench/gpu_env.sh
carry/phase_lab 2800 140 48,66,88
