# Session 21, call 7: the two optimizer labs after their shared parts moved to bench/lab/step_parts.h (GEMM and AdamW
# loads, the green-context stream): both run and print figures like calls 5-6 and session 10's, at smaller sizes.
set -u
source bench/gpu_env.sh
carry/phase_lab 1000 40 48 7
carry/overlap_lab 1000 20 8 16
